package totalorder

import (
	"encoding/binary"
	"errors"
)

// Every proposal travels in the Raft log wrapped in an envelope:
//
//	byte 0     version (2)
//	bytes 1-8  the proposing node's Raft term when it handed the proposal
//	           to raft (big endian; set by the raft goroutine)
//	uvarint    origin node id
//	uvarint    local proposal id
//	rest       the payload (all consumers ever see)
//
// The origin matches the committed entry to its waiting Propose call by
// (node, proposal id). The term makes retries safe: an entry whose envelope
// term differs from the term it was appended in (a proposal that reached a
// leader of a later term than the one it was made for) is never delivered,
// on any node. So once a node applies an entry of a term newer than a
// pending proposal's envelope term without having delivered that proposal,
// the proposal can never be delivered and Propose re-proposes it.
const envelopeVersion = 2

const envelopeTermOff, envelopeTermLen = 1, 8

func encodeEnvelope(node, prop uint64, payload []byte) []byte {
	b := make([]byte, 1+envelopeTermLen, 1+envelopeTermLen+2*binary.MaxVarintLen64+len(payload))
	b[0] = envelopeVersion
	b = binary.AppendUvarint(b, node)
	b = binary.AppendUvarint(b, prop)
	return append(b, payload...)
}

// setEnvelopeTerm stamps the term into an encoded envelope.
func setEnvelopeTerm(b []byte, term uint64) {
	binary.BigEndian.PutUint64(b[envelopeTermOff:envelopeTermOff+envelopeTermLen], term)
}

var errBadEnvelope = errors.New("totalorder: bad proposal envelope")

func decodeEnvelope(b []byte) (term, node, prop uint64, payload []byte, err error) {
	if len(b) < 1+envelopeTermLen || b[0] != envelopeVersion {
		return 0, 0, 0, nil, errBadEnvelope
	}
	term = binary.BigEndian.Uint64(b[envelopeTermOff : envelopeTermOff+envelopeTermLen])
	b = b[1+envelopeTermLen:]
	node, k := binary.Uvarint(b)
	if k <= 0 {
		return 0, 0, 0, nil, errBadEnvelope
	}
	b = b[k:]
	prop, k = binary.Uvarint(b)
	if k <= 0 {
		return 0, 0, 0, nil, errBadEnvelope
	}
	return term, node, prop, b[k:], nil
}
