package totalorder

import (
	"encoding/binary"
	"errors"
)

// Every proposal travels in the Raft log wrapped in an envelope so that the
// node that proposed it can match the committed entry to its waiting Propose
// call: version byte 1, uvarint origin node id, uvarint local proposal id,
// then the payload. Consumers only ever see the payload.
const envelopeVersion = 1

func encodeEnvelope(node, prop uint64, payload []byte) []byte {
	b := make([]byte, 0, 1+2*binary.MaxVarintLen64+len(payload))
	b = append(b, envelopeVersion)
	b = binary.AppendUvarint(b, node)
	b = binary.AppendUvarint(b, prop)
	return append(b, payload...)
}

var errBadEnvelope = errors.New("totalorder: bad proposal envelope")

func decodeEnvelope(b []byte) (node, prop uint64, payload []byte, err error) {
	if len(b) < 1 || b[0] != envelopeVersion {
		return 0, 0, nil, errBadEnvelope
	}
	b = b[1:]
	node, k := binary.Uvarint(b)
	if k <= 0 {
		return 0, 0, nil, errBadEnvelope
	}
	b = b[k:]
	prop, k = binary.Uvarint(b)
	if k <= 0 {
		return 0, 0, nil, errBadEnvelope
	}
	return node, prop, b[k:], nil
}
