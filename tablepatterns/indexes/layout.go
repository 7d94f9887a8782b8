package indexes

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/tablekeeper/tablekeeper/internal/text"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Row key prefixes of the rows this package keeps, all under
// storeadapter.ReservedPrefix (a reconcile of an entity whose RowKey
// starts with it is refused).
const (
	memberPrefix     = storeadapter.ReservedPrefix + "m." // membership record of an entity: + its RowKey
	memberHashPrefix = storeadapter.ReservedPrefix + "h." // ... of an entity whose RowKey is too long: + SHA-256
	copyPrefix       = storeadapter.ReservedPrefix + "c." // partition copy: + name + "_" + encoded value
	listPrefix       = storeadapter.ReservedPrefix + "l." // partition list part: + name + "_" + encoded value + " !" + part
	tableCopyPrefix  = storeadapter.ReservedPrefix + "t." // table copy, in partition "<name>_<pk>": + encoded value
)

// Bookkeeping properties of index entities. Copies hold the source
// entity's properties besides, so an entity with a property whose name
// starts with bookkeepingPrefix cannot be copied.
const (
	bookkeepingPrefix = "tk"
	propOwner         = "tkOwner" // a copy's source RowKey
	propGen           = "tkGen"   // generation of the write (table, rows stores)
	propTombs         = "tkTombs" // a copy row's removed owners: lines "gen\trk"
	propDead          = "tkDead"  // a rows entry that was removed (a tombstone)
	// propWaited marks a copy whose value another entity of its partition
	// found held: when the owner leaves the value, the reconcile that
	// removes it reconciles those entities (see wake).
	propWaited = "tkWaited"
	// copyBookkeeping is how many of a copy's properties are bookkeeping.
	copyBookkeeping = 4
)

func reservedProperty(name string) bool { return strings.HasPrefix(name, bookkeepingPrefix) }

// index is one resolved declaration.
type index struct {
	Decl
	source string // the source table
	table  string // the index table of the table and rows stores
}

// partition reports whether the index lives in the source partition and
// changes in one transaction with the membership record.
func (ix *index) partition() bool { return ix.Store == StorePartition }

// rowsKeyed reports whether the index keeps a key's entries as rows keyed
// by generation, written by the rows protocol (see rowsState): a rows
// index, and a table list, whose rows are its markers (see markers).
func (ix *index) rowsKeyed() bool {
	return ix.Kind == KindRows || ix.Kind == KindList && ix.Store == StoreTable
}

// tableIndexes are the indexes of one source table.
type tableIndexes struct {
	source  string
	indexes []*index
}

// lookup returns the index of that name.
func (ti *tableIndexes) lookup(name string) *index {
	for _, ix := range ti.indexes {
		if strings.EqualFold(ix.Name, name) {
			return ix
		}
	}
	return nil
}

// memberRowKey is the RowKey of an entity's membership record.
func memberRowKey(rk string) string {
	if k := memberPrefix + rk; storeadapter.UTF16Len(k) <= storeadapter.MaxKeyChars {
		return k
	}
	sum := sha256.Sum256([]byte(rk))
	return memberHashPrefix + hex.EncodeToString(sum[:])
}

// copyRowKey is the RowKey of a partition copy for an encoded value.
func copyRowKey(ix *index, value string) string { return copyPrefix + ix.Name + "_" + value }

// tableCopyRowKey is the RowKey of a table copy for an encoded value (its
// PartitionKey is copyPartition's).
func tableCopyRowKey(value string) string { return tableCopyPrefix + value }

// listBase is the part of a partition list's RowKeys that every part of a
// value shares; listPartKey adds the part number.
func listBase(ix *index, value string) string { return listPrefix + ix.Name + "_" + value + keySep }

// keySep joins escaped key parts (see the package doc).
const keySep = " !"

// memberKey is a source entity's key as one RowKey of a rows index.
func memberKey(pk, rk string) string { return EscapeKey(pk) + keySep + EscapeKey(rk) }

// genDigits is the length of a generation in a rows index RowKey
// (format 2, see rowKey): memberKey + keySep + the generation in
// genDigits digits, zero-padded. A key's rows sort next to each other, by
// generation, its format-1 row (memberKey alone) first: an escaped key
// never holds keySep (EscapeKey's space is followed by a hex digit, which
// sorts after "!"), so whatever follows a key in another key's RowKey
// sorts after keySep. A key is listed under a value while any of its rows
// there is live (tkDead false): every settle makes a key's other rows
// dead (see rowsState), and the release before this one, which reads
// these rows but writes format 1, lists them the same way.
const genDigits = 19

// splitMemberKey reverses memberKey, and reads the key of a rows index
// row of format 2 too (a generation after the key pair; see genDigits).
func splitMemberKey(s string) (pk, rk string, err error) {
	a, b, ok := strings.Cut(s, keySep)
	if !ok {
		return "", "", fmt.Errorf("index: %q is not an escaped key pair", text.Truncate(s, 60))
	}
	if key, gen, ok := strings.Cut(b, keySep); ok {
		if len(gen) != genDigits || strings.Trim(gen, "0123456789") != "" {
			return "", "", fmt.Errorf("index: %q is not an escaped key pair with a generation", text.Truncate(s, 60))
		}
		b = key
	}
	if pk, err = UnescapeKey(a); err == nil {
		rk, err = UnescapeKey(b)
	}
	return pk, rk, err
}

// fitsKey reports whether s can be a PartitionKey or RowKey.
func fitsKey(s string) bool { return storeadapter.ValidateKey("key", s) == nil }

// membership is an entity's membership record: what its indexes hold.
//
//	property     type    meaning
//	Gen          Int64   the generation of the last registration (see Set.Reconcile)
//	A_<index>    String  the applied state: the encoded value the entity is
//	                     indexed under ("" or absent: none); for a copy,
//	                     the value, "#" and a hash of the copied properties
//	S_<index>    String  table copies and blob lists (and rows indexes in
//	                     format 1, table lists in formats 1 and 2): the
//	                     values still to be settled at generation Gen
//	                     (absent: settled), one per line: the encoded
//	                     value, a tab, and the latest generation that made
//	                     it the index's value (0 when none did); a table
//	                     copy's and a blob list's stay after their settle
//	                     until the next reconcile (see lazy)
//	T_<index>    Int64   rows store (format 2) and table lists (format 3,
//	                     their markers) only: the generation in the
//	                     RowKey of the key's row under the applied value
//	                     (absent: its format-1 row, memberKey alone; a
//	                     table list's line)
//	U_<index>    Boolean the same: true while that row is not known to
//	                     exist (see rowsState)
//	K_<index>    String  the same: the key's rows that must end dead, in
//	                     the order registered, one per line: the encoded
//	                     value, a tab, the generation in the RowKey (0:
//	                     the format-1 row), and a tab and "s" for a stray,
//	                     a tab and "l" for a table list's legacy kill (see
//	                     rowRef)
//	R            String  the ETag of the entity as the last write of the
//	                     record that read it after reading the record
//	                     found it (absent: unknown, as older releases
//	                     leave it, or there was no entity); see
//	                     Set.Reconcile, step 2
//	Key          String  the entity's RowKey, when the record's RowKey is a hash
//	V            Int32   the record's format: 3 once a table list has had
//	                     T_, U_ or K_, 2 once a rows index has, else
//	                     absent (1; see recordFormat)
type membership struct {
	exists  bool
	etag    string
	gen     int64
	format  int64                // V; 1 when absent
	applied map[string]string    // index name -> state
	pending map[string][]pending // index name -> values to settle
	// rows is, per rows index and table list, its rows' state (formats 2
	// and 3; see rowsState). A format-1 record's pending values of a rows
	// index, and an older record's of a table list, are read into it (see
	// readMembership), and rewrite is then set: the record must be
	// written in the newer format before any row it names is.
	rows    map[string]rowsState
	rewrite bool
	// seen is R: the version of the entity the record's last write was
	// computed from, "" when unknown (see Set.Reconcile, step 2).
	seen string
}

// recordFormat is the newest membership record format this release
// knows. It writes format 3 (V=3) when a table list's members are markers
// (see markers), format 2 (V=2) when a rows index's rows are keyed by
// generation (see rowsState), else records without V, format 1, which
// releases before it read as well. A record of a later format was written by a newer release: Reconcile, Sync and
// rebuild refuse to act on it (ErrNewerFormat, a transient error: the
// message is retried, and taken by a newer worker) instead of rewriting
// it in a format that would drop what they do not know. A release that
// introduces a format can so be rolled out once every worker and CLI
// runs one that refuses it (docs/index.md, "Upgrades").
const recordFormat = 3

// ErrNewerFormat is wrapped by the error of a reconcile, Sync or rebuild
// that met a membership record of a format newer than this release
// knows. It is transient: retried, it succeeds on a newer worker.
var ErrNewerFormat = errors.New("index: the membership record has a newer format than this release knows: upgrade this worker")

// known returns an error wrapping ErrNewerFormat when m's format is one
// this release does not know.
func (m membership) known() error {
	if m.format > recordFormat {
		return fmt.Errorf("%w (format %d, this release knows %d)", ErrNewerFormat, m.format, recordFormat)
	}
	return nil
}

// pending is one value to settle, with the latest generation that made it
// the index's value (its target), 0 when none did.
type pending struct {
	value  string
	target int64
}

// addPending returns ps with value added (an empty value is not), its
// target raised to target.
func addPending(ps []pending, value string, target int64) []pending {
	if value == "" {
		return ps
	}
	if i := slices.IndexFunc(ps, func(p pending) bool { return p.value == value }); i >= 0 {
		ps[i].target = max(ps[i].target, target)
		return ps
	}
	return append(ps, pending{value, target})
}

// readMembership reads a membership record (e nil: none) of a table with
// the indexes ti (nil: the record as stored, unconverted). A format-1
// record's rows indexes are read as format 2 (see fromFormat1).
func readMembership(e *storeadapter.Entity, ti *tableIndexes) membership {
	m := membership{format: 1, applied: map[string]string{}, pending: map[string][]pending{}, rows: map[string]rowsState{}}
	if e == nil {
		return m
	}
	m.exists, m.etag = true, e.ETag
	m.gen, _ = e.Properties["Gen"].(int64)
	switch v := e.Properties["V"].(type) {
	case nil:
	case int32:
		m.format = int64(v)
	case int64:
		m.format = v
	default:
		m.format = 0
	}
	if m.format < 1 { // not a format any release writes: refused
		m.format = math.MaxInt64
	}
	for name, v := range e.Properties {
		if len(name) < 2 || name[1] != '_' {
			if s, _ := v.(string); name == "R" {
				m.seen = s
			}
			continue
		}
		ix := name[2:]
		switch s, _ := v.(string); name[0] {
		case 'A':
			if s != "" {
				m.applied[ix] = s
			}
		case 'S':
			for line := range strings.SplitSeq(s, "\n") {
				value, gen, _ := strings.Cut(line, "\t")
				target, _ := strconv.ParseInt(gen, 10, 64)
				m.pending[ix] = addPending(m.pending[ix], value, target)
			}
		case 'T':
			st := m.rows[ix]
			st.live, _ = v.(int64)
			m.rows[ix] = st
		case 'U':
			st := m.rows[ix]
			st.unproven, _ = v.(bool)
			m.rows[ix] = st
		case 'K':
			st := m.rows[ix]
			st.kills = parseKills(s)
			m.rows[ix] = st
		}
	}
	if ti != nil {
		if m.format == 1 {
			m.fromFormat1(ti)
		}
		if m.format < 3 {
			m.listsToRows(ti)
		}
		for name, st := range m.rows {
			if ix := ti.lookup(name); ix != nil && ix.Kind == KindList {
				st.list = true
				m.rows[name] = st
			}
		}
	}
	return m
}

// entity renders the record for a write (Replace).
func (m membership) entity(pk, rk string) storeadapter.Entity {
	e := storeadapter.Entity{PartitionKey: pk, RowKey: memberRowKey(rk), Properties: map[string]any{"Gen": m.gen}}
	if strings.HasPrefix(e.RowKey, memberHashPrefix) {
		e.Properties["Key"] = rk
	}
	if m.seen != "" {
		e.Properties["R"] = m.seen
	}
	for _, name := range slices.Sorted(maps.Keys(m.applied)) {
		if s := m.applied[name]; s != "" {
			e.Properties["A_"+name] = s
		}
	}
	if f := max(m.format, m.rowsFormat()); f >= 2 {
		e.Properties["V"] = int32(f)
	}
	for _, name := range slices.Sorted(maps.Keys(m.rows)) {
		st := m.rows[name]
		if st.live != 0 {
			e.Properties["T_"+name] = st.live
		}
		if st.unproven {
			e.Properties["U_"+name] = true
		}
		if len(st.kills) > 0 {
			e.Properties["K_"+name] = formatKills(st.kills)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(m.pending)) {
		var lines []string
		for _, p := range m.pending[name] {
			lines = append(lines, p.value+"\t"+strconv.FormatInt(p.target, 10))
		}
		if len(lines) > 0 {
			e.Properties["S_"+name] = strings.Join(lines, "\n")
		}
	}
	return e
}

// nextGen is the generation of a registration over m at the clock now:
// above the record's, the clock's, and every generation its rows states
// name (a table list taken over from format 2 names its live marker one
// above the record's: see listsToRows), so that the registration's own
// row is never one it names, to kill or as live.
func (m membership) nextGen(now int64) int64 {
	g := max(m.gen+1, now)
	for _, st := range m.rows {
		g = max(g, st.live+1)
		for _, k := range st.kills {
			g = max(g, k.gen+1)
		}
	}
	return g
}

// rowsFormat is the format m's rows states need: 3 when a table list's
// names a marker or anything to settle (see markers), 2 when a rows
// index's names a row of format 2 or anything to settle, else 1.
func (m membership) rowsFormat() int64 {
	f := int64(1)
	for _, st := range m.rows {
		switch {
		case st.live == 0 && st.idle():
		case st.list:
			f = 3
		default:
			f = max(f, 2)
		}
	}
	return f
}

// toWrite is m made ready for a write of the record: once it is written
// in a format it stays so (that format from then on, for this
// reconcile's later writes too, such as its clear), since a release
// before it would take the record for its own, and could make a format-1
// row live again that this one wrote dead or still means to (format 2),
// or register a table list in its lines again (format 3).
func (m membership) toWrite() membership {
	m.format = max(m.format, m.rowsFormat())
	m.rewrite = false
	return m
}

// seenTag is how a record's R names the version of the entity e a
// reconcile read: its ETag, "" when there was none (no ETag names an
// absence: the entity may have been made and deleted again since).
func seenTag(e *storeadapter.Entity) string {
	if e == nil {
		return ""
	}
	return e.ETag
}

// unfenced reports whether a reconcile that found the record m and the
// entity e (nil: none), and registers nothing, must fence the record (see
// Set.Reconcile, step 2): it exists, and the entity may have been written
// since its last write read it.
func (m membership) unfenced(e *storeadapter.Entity) bool {
	seen := seenTag(e)
	return m.exists && (seen == "" || m.seen != seen)
}

// clone returns a deep copy.
func (m membership) clone() membership {
	c := m
	c.applied = maps.Clone(m.applied)
	c.rows = map[string]rowsState{}
	for k, v := range m.rows {
		c.rows[k] = v.clone()
	}
	c.pending = map[string][]pending{}
	for k, v := range m.pending {
		c.pending[k] = slices.Clone(v)
	}
	return c
}

// declared returns a deep copy of m without the state of indexes ti no
// longer declares: their applied values and the values still to settle,
// which no declaration says how to write any more (their entries stay
// where the old declaration kept them). A registration writes it, so a
// record sheds an index removed from the config at the entity's next
// change, reconcile or rebuild.
func (m membership) declared(ti *tableIndexes) membership {
	c := m.clone()
	for name := range c.applied {
		if ti.lookup(name) == nil {
			delete(c.applied, name)
		}
	}
	for name := range c.pending {
		if ti.lookup(name) == nil {
			delete(c.pending, name)
		}
	}
	for name := range c.rows {
		if ix := ti.lookup(name); ix == nil || !ix.rowsKeyed() {
			delete(c.rows, name)
		}
	}
	return c
}

// stateValue is the encoded value of an applied state ("" for none).
func stateValue(state string) string {
	v, _, _ := strings.Cut(state, "#")
	return v
}

// contentHash is the hash a copy's applied state records: a change to a
// copied property changes it, so the copy is rewritten.
func contentHash(props map[string]any) string {
	h := sha256.New()
	for _, name := range slices.Sorted(maps.Keys(props)) {
		v := props[name]
		t, _ := storeadapter.TypeOf(v)
		key, err := EncodeValue(v)
		if err != nil { // a long string or binary: hash the value itself
			key = fmt.Sprintf("%v", v)
		}
		fmt.Fprintf(h, "%s\x00%d\x00%d:%s\x00", name, t, len(key), key)
	}
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:12])
}
