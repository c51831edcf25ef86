package analysis

import (
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"strings"
	"unicode/utf8"
)

// canonical returns PostgreSQL's text output for a value of type typ given
// as input text s (a literal or a text-format parameter), and false when the
// analyzer does not know how to reproduce that output exactly for typ. A
// false result makes the caller use a coarser key, never a wrong one.
func canonical(typ, s string) (string, bool) {
	switch typ {
	case "int2", "int4", "int8", "oid":
		t := strings.TrimSpace(s)
		bits := map[string]int{"int2": 16, "int4": 32, "int8": 64, "oid": 64}[typ]
		v, err := strconv.ParseInt(t, 10, bits)
		if err != nil {
			return "", false
		}
		if typ == "oid" && (v < 0 || v > 1<<32-1) {
			return "", false
		}
		if t == strconv.FormatInt(v, 10) {
			return t, true
		}
		return strconv.FormatInt(v, 10), true
	case "text", "varchar":
		if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
			return "", false
		}
		if typ == "varchar" && strings.HasSuffix(s, " ") {
			// Stored into a varchar(n), trailing spaces beyond n are cut
			// (the catalog does not keep n): not surely the key.
			return "", false
		}
		return s, true
	case "bool":
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "t", "true", "y", "yes", "on", "1":
			return "t", true
		case "f", "false", "n", "no", "off", "0":
			return "f", true
		}
		return "", false
	case "uuid":
		t := strings.TrimSpace(s)
		t = strings.TrimSuffix(strings.TrimPrefix(t, "{"), "}")
		t = strings.ReplaceAll(t, "-", "")
		if len(t) != 32 {
			return "", false
		}
		b, err := hex.DecodeString(t)
		if err != nil {
			return "", false
		}
		return formatUUID(b), true
	}
	return "", false
}

func formatUUID(b []byte) string {
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// canonicalBinary is canonical for a binary-format parameter.
func canonicalBinary(typ string, b []byte) (string, bool) {
	switch typ {
	case "int2", "int4", "int8", "oid":
		var v int64
		switch len(b) {
		case 2:
			v = int64(int16(binary.BigEndian.Uint16(b)))
		case 4:
			if typ == "oid" {
				v = int64(binary.BigEndian.Uint32(b))
			} else {
				v = int64(int32(binary.BigEndian.Uint32(b)))
			}
		case 8:
			v = int64(binary.BigEndian.Uint64(b))
		default:
			return "", false
		}
		return canonical(typ, strconv.FormatInt(v, 10))
	case "text", "varchar":
		return canonical(typ, string(b))
	case "bool":
		if len(b) != 1 {
			return "", false
		}
		if b[0] != 0 {
			return "t", true
		}
		return "f", true
	case "uuid":
		if len(b) != 16 {
			return "", false
		}
		return formatUUID(b), true
	}
	return "", false
}

// TextArray splits the text form of a one-dimensional array ("{1,2,\"a b\"}").
// NULL elements and anything it cannot parse make it return false.
func TextArray(s string) ([]string, bool) {
	s = strings.TrimSpace(s)
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return nil, false
	}
	body := s[1 : len(s)-1]
	if strings.TrimSpace(body) == "" {
		return []string{}, true
	}
	var out []string
	i := 0
	for {
		for i < len(body) && body[i] == ' ' {
			i++
		}
		if i >= len(body) {
			return nil, false
		}
		var elem strings.Builder
		if body[i] == '"' {
			i++
			closed := false
			for i < len(body) {
				c := body[i]
				if c == '\\' && i+1 < len(body) {
					elem.WriteByte(body[i+1])
					i += 2
					continue
				}
				i++
				if c == '"' {
					closed = true
					break
				}
				elem.WriteByte(c)
			}
			if !closed {
				return nil, false
			}
		} else {
			j := i
			for j < len(body) && body[j] != ',' {
				if body[j] == '{' || body[j] == '"' || body[j] == '\\' {
					return nil, false
				}
				j++
			}
			v := strings.TrimSpace(body[i:j])
			if strings.EqualFold(v, "null") || v == "" {
				return nil, false
			}
			elem.WriteString(v)
			i = j
		}
		out = append(out, elem.String())
		for i < len(body) && body[i] == ' ' {
			i++
		}
		if i == len(body) {
			return out, true
		}
		if body[i] != ',' {
			return nil, false
		}
		i++
	}
}

// binaryArray decodes a one-dimensional binary array into element bytes.
func binaryArray(b []byte) ([][]byte, bool) {
	if len(b) < 12 {
		return nil, false
	}
	ndim := int32(binary.BigEndian.Uint32(b))
	b = b[12:]
	if ndim == 0 {
		return [][]byte{}, true
	}
	if ndim != 1 || len(b) < 8 {
		return nil, false
	}
	n := int32(binary.BigEndian.Uint32(b))
	b = b[8:]
	if n < 0 || int(n) > len(b)/4 {
		return nil, false
	}
	out := make([][]byte, 0, n)
	for i := int32(0); i < n; i++ {
		if len(b) < 4 {
			return nil, false
		}
		l := int32(binary.BigEndian.Uint32(b))
		b = b[4:]
		if l < 0 || int(l) > len(b) {
			return nil, false // NULL element or truncated
		}
		out = append(out, b[:l])
		b = b[l:]
	}
	return out, len(b) == 0
}
