package localstore

import (
	"bytes"
	"cmp"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// This file evaluates the OData $filter subset that storeadapter's builder
// produces: comparisons (eq ne gt ge lt le) of a property with a typed
// literal, joined by and / or / not and parentheses. Like the service, a
// comparison is true only when the property exists and has the literal's
// EDM type (Int32 and Int64 do not mix: compare Int64 with 42L).

// predicate is a parsed filter.
type predicate interface {
	match(r *row) bool
}

type matchAll struct{}

func (matchAll) match(*row) bool { return true }

type andNode struct{ l, r predicate }
type orNode struct{ l, r predicate }
type notNode struct{ p predicate }

func (n andNode) match(r *row) bool { return n.l.match(r) && n.r.match(r) }
func (n orNode) match(r *row) bool  { return n.l.match(r) || n.r.match(r) }
func (n notNode) match(r *row) bool { return !n.p.match(r) }

type cmpNode struct {
	prop string
	op   storeadapter.Op
	lit  any
}

func (n cmpNode) match(r *row) bool {
	var v any
	switch n.prop {
	case "PartitionKey":
		v = r.pk
	case "RowKey":
		v = r.rk
	case "Timestamp":
		v = r.ts
	default:
		var ok bool
		if v, ok = r.props[n.prop]; !ok {
			return false
		}
	}
	c, ok := compareValues(v, n.lit)
	if !ok {
		return false
	}
	switch n.op {
	case storeadapter.Eq:
		return c == 0
	case storeadapter.Ne:
		return c != 0
	case storeadapter.Gt:
		return c > 0
	case storeadapter.Ge:
		return c >= 0
	case storeadapter.Lt:
		return c < 0
	default: // Le
		return c <= 0
	}
}

// compareValues orders two values of the same EDM type; ok is false when the
// types differ or a double is NaN.
func compareValues(a, b any) (int, bool) {
	switch x := a.(type) {
	case string:
		y, ok := b.(string)
		return storeadapter.CompareUTF16(x, y), ok
	case bool:
		y, ok := b.(bool)
		return cmpBool(x, y), ok
	case int32:
		y, ok := b.(int32)
		return cmp.Compare(x, y), ok
	case int64:
		y, ok := b.(int64)
		return cmp.Compare(x, y), ok
	case float64:
		y, ok := b.(float64)
		return cmp.Compare(x, y), ok && !math.IsNaN(x) && !math.IsNaN(y)
	case time.Time:
		y, ok := b.(time.Time)
		return x.Compare(y), ok
	case storeadapter.GUID:
		y, ok := b.(storeadapter.GUID)
		return bytes.Compare(x[:], y[:]), ok
	case []byte:
		y, ok := b.([]byte)
		return bytes.Compare(x, y), ok
	}
	return 0, false
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case b:
		return -1
	}
	return 1
}

// parseFilter parses filter text; "" matches everything.
func parseFilter(text string) (predicate, error) {
	if strings.TrimSpace(text) == "" {
		return matchAll{}, nil
	}
	p := &parser{src: text}
	n, err := p.or()
	if err == nil {
		// Anything left over is an error, punctuation included: peek
		// returns "" for a character that starts no word, such as ' or ;.
		if p.skipSpace(); p.pos < len(p.src) {
			err = p.fail("unexpected %q after the expression", p.src[p.pos:])
		}
	}
	if err != nil {
		return nil, err
	}
	return n, nil
}

type parser struct {
	src string
	pos int
}

func (p *parser) fail(format string, args ...any) error {
	return fmt.Errorf("%w: filter %q at offset %d: %s", storeadapter.ErrInvalidInput, p.src, p.pos, fmt.Sprintf(format, args...))
}

func (p *parser) skipSpace() {
	for p.pos < len(p.src) && p.src[p.pos] == ' ' {
		p.pos++
	}
}

// peek returns the next word or punctuation without consuming it.
func (p *parser) peek() string {
	p.skipSpace()
	if p.pos >= len(p.src) {
		return ""
	}
	if c := p.src[p.pos]; c == '(' || c == ')' {
		return string(c)
	}
	end := p.pos
	for end < len(p.src) && isWordByte(p.src[end]) {
		end++
	}
	return p.src[p.pos:end]
}

func isWordByte(c byte) bool {
	return c == '_' || c == '-' || c == '.' || c == '+' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

func (p *parser) accept(word string) bool {
	if p.peek() == word {
		p.pos += len(word)
		return true
	}
	return false
}

func (p *parser) or() (predicate, error) {
	l, err := p.and()
	for err == nil && p.accept("or") {
		var r predicate
		if r, err = p.and(); err == nil {
			l = orNode{l, r}
		}
	}
	return l, err
}

func (p *parser) and() (predicate, error) {
	l, err := p.unary()
	for err == nil && p.accept("and") {
		var r predicate
		if r, err = p.unary(); err == nil {
			l = andNode{l, r}
		}
	}
	return l, err
}

func (p *parser) unary() (predicate, error) {
	if p.accept("not") {
		n, err := p.unary()
		return notNode{n}, err
	}
	if p.accept("(") {
		n, err := p.or()
		if err == nil && !p.accept(")") {
			err = p.fail("missing )")
		}
		return n, err
	}
	return p.comparison()
}

func (p *parser) comparison() (predicate, error) {
	prop := p.peek()
	if prop == "" || !(prop == "PartitionKey" || prop == "RowKey" || prop == "Timestamp" || storeadapter.ValidatePropertyName(prop) == nil) {
		return nil, p.fail("expected a property name, got %q", prop)
	}
	p.pos += len(prop)
	op := storeadapter.Op(p.peek())
	switch op {
	case storeadapter.Eq, storeadapter.Ne, storeadapter.Gt, storeadapter.Ge, storeadapter.Lt, storeadapter.Le:
		p.pos += len(op)
	default:
		return nil, p.fail("expected a comparison operator, got %q", op)
	}
	lit, err := p.literal()
	if err != nil {
		return nil, err
	}
	return cmpNode{prop: prop, op: op, lit: lit}, nil
}

// literal parses a typed OData literal.
func (p *parser) literal() (any, error) {
	p.skipSpace()
	rest := p.src[p.pos:]
	for _, prefix := range []string{"datetime'", "guid'", "X'", "binary'", "'"} {
		if strings.HasPrefix(rest, prefix) {
			p.pos += len(prefix)
			s, err := p.quoted()
			if err != nil {
				return nil, err
			}
			return typedQuoted(prefix, s, p)
		}
	}
	word := p.peek()
	p.pos += len(word)
	switch {
	case word == "true" || word == "false":
		return word == "true", nil
	case strings.HasSuffix(word, "L"):
		if n, err := strconv.ParseInt(strings.TrimSuffix(word, "L"), 10, 64); err == nil {
			return n, nil
		}
	case strings.ContainsAny(word, ".eE"):
		if f, err := strconv.ParseFloat(word, 64); err == nil {
			return f, nil
		}
	default:
		if n, err := strconv.ParseInt(word, 10, 32); err == nil {
			return int32(n), nil
		}
	}
	return nil, p.fail("expected a literal, got %q", word)
}

// quoted reads up to the closing quote, turning each doubled quote back
// into one.
func (p *parser) quoted() (string, error) {
	var b strings.Builder
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		p.pos++
		if c != '\'' {
			b.WriteByte(c)
			continue
		}
		if p.pos < len(p.src) && p.src[p.pos] == '\'' {
			b.WriteByte('\'')
			p.pos++
			continue
		}
		return b.String(), nil
	}
	return "", p.fail("unterminated string literal")
}

func typedQuoted(prefix, s string, p *parser) (any, error) {
	switch prefix {
	case "datetime'":
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return nil, p.fail("bad datetime %q", s)
		}
		return storeadapter.DateTime(t), nil
	case "guid'":
		g, err := storeadapter.ParseGUID(s)
		if err != nil {
			return nil, p.fail("bad guid %q", s)
		}
		return g, nil
	case "X'", "binary'":
		b, err := hex.DecodeString(s)
		if err != nil {
			return nil, p.fail("bad binary %q", s)
		}
		return b, nil
	}
	return s, nil
}

// bounds is the key range a filter confines a scan to: it starts at lo and
// ends once beyond reports true. Filters the bounds do not capture are still
// checked row by row, so bounds only ever make a scan shorter.
type bounds struct {
	lo           *row
	pkEq         *string
	pkHi, rkHi   *string
	pkHiIncl     bool
	rkHiIncl     bool
	lowRK, lowPK string
}

// keyBounds reads the key bounds of the top-level conjunction of f.
func keyBounds(f predicate) bounds {
	var b bounds
	var walk func(predicate)
	walk = func(n predicate) {
		switch x := n.(type) {
		case andNode:
			walk(x.l)
			walk(x.r)
		case cmpNode:
			s, ok := x.lit.(string)
			if !ok {
				return
			}
			switch {
			case x.prop == "PartitionKey" && x.op == storeadapter.Eq:
				b.pkEq = &s
			case x.prop == "PartitionKey" && (x.op == storeadapter.Ge || x.op == storeadapter.Gt):
				b.lowPK = maxUTF16(b.lowPK, s)
			case x.prop == "PartitionKey" && (x.op == storeadapter.Lt || x.op == storeadapter.Le):
				b.pkHi, b.pkHiIncl = &s, x.op == storeadapter.Le
			case x.prop == "RowKey" && (x.op == storeadapter.Ge || x.op == storeadapter.Gt):
				b.lowRK = maxUTF16(b.lowRK, s)
			case x.prop == "RowKey" && (x.op == storeadapter.Lt || x.op == storeadapter.Le):
				b.rkHi, b.rkHiIncl = &s, x.op == storeadapter.Le
			}
		}
	}
	walk(f)
	b.lo = &row{pk: b.lowPK}
	if b.pkEq != nil {
		b.lo = &row{pk: *b.pkEq, rk: b.lowRK}
	}
	return b
}

// beyond reports whether r and every row after it lie outside the bounds.
func (b bounds) beyond(r *row) bool {
	if b.pkEq != nil {
		return r.pk != *b.pkEq || b.rkHi != nil && past(r.rk, *b.rkHi, b.rkHiIncl)
	}
	return b.pkHi != nil && past(r.pk, *b.pkHi, b.pkHiIncl)
}

// past reports whether v lies above the bound hi, in the keys' order.
func past(v, hi string, inclusive bool) bool {
	c := storeadapter.CompareUTF16(v, hi)
	return c > 0 || c == 0 && !inclusive
}

// maxUTF16 returns the later of two bounds in the keys' order.
func maxUTF16(a, b string) string {
	if storeadapter.LessUTF16(a, b) {
		return b
	}
	return a
}
