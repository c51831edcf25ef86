package analysis

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// A fingerprint is a statement's text with each literal replaced by a
// placeholder of its class: two texts with the same fingerprint differ
// only in the values of their literals, so PostgreSQL parses them into
// the same tree but for the values of those constants. Everything else
// is kept byte for byte: keywords (NULL, TRUE, FALSE), identifiers,
// operators, casts, parameters ($n), comments and whitespace. An IN list
// of three literals therefore never shares a fingerprint with one of four,
// nor `k = NULL` with `k = 1`, nor `- 1` with `-1`.
//
// The lexer follows PostgreSQL's scanner (scan.l) only as far as it needs
// to find where literals start and end; where the text holds anything
// whose reading depends on a setting or a server version, or that it does
// not follow exactly, it declines, and the statement is analyzed from its
// text as before:
//
//   - strings with a backslash (their value depends on
//     standard_conforming_strings), E'', U&'', U&"", B'', X'', N'', and
//     any other identifier directly followed by a quote;
//   - string literals followed by another one (PostgreSQL joins them
//     across a newline);
//   - numbers in hexadecimal, octal or binary, with underscores, or
//     followed by a letter, digit, underscore, dollar or dot (PostgreSQL 15
//     reads `0x1F` as `0 AS x1F`, 16 and later as 31);
//   - parameters followed by such a character, a `$` that starts neither a
//     parameter nor a dollar quote;
//   - unterminated strings, quoted identifiers, dollar quotes and
//     comments, NUL bytes and text that is not UTF-8.

// Literal classes, as they appear in a fingerprint after a NUL byte.
const (
	litInt    = 'i' // an integer PostgreSQL keeps as int4 (A_Const ival)
	litNum    = 'n' // any other number (A_Const fval: the token's text)
	litStr    = 's' // '…' without backslashes
	litDollar = 'd' // $tag$…$tag$
)

// literal is one literal of a fingerprinted text.
type literal struct {
	start, end int // byte span of the token in the text
	class      byte
}

// fingerprint returns the fingerprint of sql and its literals in text
// order, or ok false when the lexer declines.
func fingerprint(sql string) (key string, lits []literal, ok bool) {
	if strings.IndexByte(sql, 0) >= 0 || !utf8.ValidString(sql) {
		return "", nil, false
	}
	var b strings.Builder
	b.Grow(len(sql))
	last := 0 // sql[last:i] is still to be copied
	emit := func(l literal) {
		b.WriteString(sql[last:l.start])
		b.WriteByte(0)
		b.WriteByte(l.class)
		last = l.end
		lits = append(lits, l)
	}
	i := 0
	for i < len(sql) {
		c := sql[i]
		switch {
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-':
			i = lineCommentEnd(sql, i)
		case c == '/' && i+1 < len(sql) && sql[i+1] == '*':
			end, ok := blockCommentEnd(sql, i)
			if !ok {
				return "", nil, false
			}
			i = end
		case c == '\'':
			end, ok := quotedEnd(sql, i, '\'')
			if !ok || strings.IndexByte(sql[i:end], '\\') >= 0 || continuedString(sql, end) {
				return "", nil, false
			}
			emit(literal{start: i, end: end, class: litStr})
			i = end
		case c == '"':
			end, ok := quotedEnd(sql, i, '"')
			if !ok {
				return "", nil, false
			}
			i = end
		case c == '$':
			j := i + 1
			if j < len(sql) && isDigit(sql[j]) {
				for j < len(sql) && isDigit(sql[j]) {
					j++
				}
				if j < len(sql) && (isIdentCont(sql[j]) || sql[j] == '.') {
					return "", nil, false
				}
				i = j
				continue
			}
			end, ok := dollarQuoteEnd(sql, i)
			if !ok {
				return "", nil, false
			}
			emit(literal{start: i, end: end, class: litDollar})
			i = end
		case c == '.' && i+1 < len(sql) && sql[i+1] == '.':
			i += 2 // PostgreSQL's DOT_DOT: A..0 is A, .., 0
		case isDigit(c) || (c == '.' && i+1 < len(sql) && isDigit(sql[i+1])):
			end, class, ok := numberEnd(sql, i)
			if !ok {
				return "", nil, false
			}
			emit(literal{start: i, end: end, class: class})
			i = end
		case isIdentStart(c):
			j := i + 1
			for j < len(sql) && isIdentCont(sql[j]) {
				j++
			}
			if j < len(sql) && sql[j] == '\'' {
				return "", nil, false // E'', B'', X'', N'', a typed literal written without a space
			}
			if j == i+1 && (c == 'u' || c == 'U') && j+1 < len(sql) && sql[j] == '&' && (sql[j+1] == '\'' || sql[j+1] == '"') {
				return "", nil, false
			}
			i = j
		default:
			i++
		}
	}
	if lits == nil {
		return sql, nil, true
	}
	b.WriteString(sql[last:])
	return b.String(), lits, true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isIdentStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c >= 0x80
}

func isIdentCont(c byte) bool { return isIdentStart(c) || isDigit(c) || c == '$' }

// lineCommentEnd returns the end of the -- comment at i (its newline is
// left to the caller).
func lineCommentEnd(sql string, i int) int {
	for i < len(sql) && sql[i] != '\n' && sql[i] != '\r' {
		i++
	}
	return i
}

// blockCommentEnd returns the end of the /* */ comment at i; comments
// nest, as in PostgreSQL.
func blockCommentEnd(sql string, i int) (int, bool) {
	depth := 0
	for i < len(sql) {
		switch {
		case strings.HasPrefix(sql[i:], "/*"):
			depth++
			i += 2
		case strings.HasPrefix(sql[i:], "*/"):
			depth--
			i += 2
			if depth == 0 {
				return i, true
			}
		default:
			i++
		}
	}
	return 0, false
}

// quotedEnd returns the end of the string or quoted identifier at i,
// whose quote q is escaped by doubling it.
func quotedEnd(sql string, i int, q byte) (int, bool) {
	j := i + 1
	for {
		k := strings.IndexByte(sql[j:], q)
		if k < 0 {
			return 0, false
		}
		j += k + 1
		if j < len(sql) && sql[j] == q {
			j++
			continue
		}
		return j, true
	}
}

// continuedString reports whether a string literal ending at i is
// followed, past whitespace and comments, by another one, which
// PostgreSQL would join to it (across a newline) or refuse.
func continuedString(sql string, i int) bool {
	for i < len(sql) {
		switch c := sql[i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case strings.HasPrefix(sql[i:], "--"):
			i = lineCommentEnd(sql, i)
		case strings.HasPrefix(sql[i:], "/*"):
			end, ok := blockCommentEnd(sql, i)
			if !ok {
				return true
			}
			i = end
		default:
			return c == '\''
		}
	}
	return false
}

// dollarQuoteEnd returns the end of the dollar-quoted string at i.
func dollarQuoteEnd(sql string, i int) (int, bool) {
	j := i + 1
	if j < len(sql) && sql[j] != '$' {
		if !isIdentStart(sql[j]) {
			return 0, false
		}
		for j < len(sql) && (isIdentStart(sql[j]) || isDigit(sql[j])) {
			j++
		}
	}
	if j >= len(sql) || sql[j] != '$' {
		return 0, false
	}
	delim := sql[i : j+1]
	k := strings.Index(sql[j+1:], delim)
	if k < 0 {
		return 0, false
	}
	return j + 1 + k + len(delim), true
}

// numberEnd returns the end and class of the number at i: digits, an
// optional fraction, an optional exponent, as PostgreSQL's decinteger,
// numeric and real.
func numberEnd(sql string, i int) (int, byte, bool) {
	j := i
	for j < len(sql) && isDigit(sql[j]) {
		j++
	}
	integer := true
	if j == i+1 && sql[i] == '0' && j < len(sql) && strings.IndexByte("xXoObB", sql[j]) >= 0 {
		return 0, 0, false
	}
	if j < len(sql) && sql[j] == '.' {
		if j+1 < len(sql) && sql[j+1] == '.' {
			return 0, 0, false // 1..2: PostgreSQL reads an integer, then ..
		}
		integer = false
		j++
		for j < len(sql) && isDigit(sql[j]) {
			j++
		}
	}
	if j < len(sql) && (sql[j] == 'e' || sql[j] == 'E') {
		integer = false
		j++
		if j < len(sql) && (sql[j] == '+' || sql[j] == '-') {
			j++
		}
		if j >= len(sql) || !isDigit(sql[j]) {
			return 0, 0, false
		}
		for j < len(sql) && isDigit(sql[j]) {
			j++
		}
	}
	if j < len(sql) && (isIdentCont(sql[j]) || sql[j] == '.') {
		return 0, 0, false
	}
	if integer {
		if _, ok := int4(sql[i:j]); ok {
			return j, litInt, true
		}
	}
	return j, litNum, true
}

// int4 parses a decimal integer token as PostgreSQL's scanner does
// (pg_strtoint32): ok only when it fits in an int4.
func int4(tok string) (int64, bool) {
	v, err := strconv.ParseInt(tok, 10, 32)
	return v, err == nil
}

// value returns the constant's value as pg_query reports it (A_Const
// ival formatted in decimal, fval or sval), negated when neg (a minus
// sign folded into it, or a unary minus the analyzer applied).
func (l literal) value(sql string, neg bool) string {
	tok := sql[l.start:l.end]
	switch l.class {
	case litInt:
		v, _ := int4(tok)
		if neg {
			v = -v
		}
		return strconv.FormatInt(v, 10)
	case litNum:
		if neg {
			return "-" + tok
		}
		return tok
	case litStr:
		s := strings.ReplaceAll(tok[1:len(tok)-1], "''", "'")
		if neg {
			return "-" + s
		}
		return s
	case litDollar:
		d := strings.IndexByte(tok[1:], '$') + 2
		s := tok[d : len(tok)-d]
		if neg {
			return "-" + s
		}
		return s
	}
	return ""
}
