// Package indexes is the library of secondary indexes and index entities
// (the patterns of the Azure table design guide), declared per source
// table in the worker's config (Config, Decl) and opened on a store as a
// Set: kept eventually consistent with the entities they index by
// Reconcile, rebuilt from the table by Rebuild, read through Lookup and
// Entries and compared with the table by Check. The application writes
// its entity and has it reconciled (the "index" job kind, package
// jobs/index, runs Reconcile and Rebuild for queue messages); it never
// writes an index itself. The kinds that move or delete entities (archive,
// purge, purgeday) use this library to keep the indexes of what they move
// or delete consistent.
//
// It is written against the storeadapter ports: it must not import the
// Azure SDK, the runner, the catalog, jobs/kit or any job kind. Of the
// jobs contract it uses only the config's shared settings (jobs.Duration,
// jobs.CheckRunSettings): its Config is the "index" section of the
// worker's config file.
//
// # Kinds and stores
//
// An index is a kind and a store (the patterns of the Azure table design
// guide):
//
//	kind/store      entry of value v for entity (pk, rk)           pattern
//	copy/partition  row (pk, "~tk.c.<name>_<v>"): the entity's       intra-partition secondary index
//	                properties (or Decl.Properties) + tkOwner = rk
//	copy/table      row ("<name>_<pk>", v) in Decl.Table (default:   inter-partition secondary index
//	                the source table): the properties + tkOwner,
//	                tkGen, tkTombs
//	list/partition  rk on a line of the rows (pk, "~tk.l.<name>_<v>  index entities, option 2
//	                !NNNN"): parts of one list
//	list/table      markers: rows ("<name>_<v>", "m"+EscapeKey(pk)+    index entities, option 3
//	                " !"+EscapeKey(rk)+" !"+gen) in Decl.Table, as
//	                a rows index's rows, + tkFolded; folded into
//	                "pk\trk\tgen\tL|D" on a line of the rows
//	                ("<name>_<v>", "pNNNN") (see markers)
//	list/blob       the same line in blob "<table>/<name>/<v>" of      index entities, option 1
//	                Decl.Container
//	rows            row (v, EscapeKey(pk)+" !"+EscapeKey(rk)+" !"+   one entity per member, for
//	                gen) in Decl.Table, with tkGen (= gen) and        hot or huge values
//	                tkDead: gen, 19 digits, is the generation that
//	                made v the key's value (see rowsState)
//
// v is the value's key text (EncodeValue, below). A list line's flag is
// D for a tombstone, P for a live member of a blob list whose settle made
// the key's other values dead first (see Set.Reconcile), L for another
// live one. A list's parts hold
// lines in string properties L0, L1, … of up to 32,000 characters each
// and 192 KiB in all; a list that outgrows a part spills over to the
// next, up to 60 parts, and a lookup reads them all in one range query.
// A copy never overwrites the copy of another entity that holds the same
// value: that is a conflict (ErrConflict), retried and reported by Check.
//
// # Rows in data partitions
//
// Membership records ("~tk.m.<rk>", or "~tk.h.<sha256 of rk>" for long
// RowKeys) and the partition stores' entries live in the source entity's
// partition, under storeadapter.ReservedPrefix, so that each reconcile
// changes them in one transaction. Applications must not use RowKeys
// starting with "~tk." and leave these rows out of their partition scans
// with storeadapter.ApplicationRows (RowKey lt '~tk.' or RowKey ge
// '~tk/'). A copy/table index's rows are reserved too ("~tk.t.<value>"),
// so one kept in its source table is left out of every scan of the
// application's data by the same rule.
//
// Set.Reconcile's doc comment gives the reconcile's steps and why every
// crash position and every interleaving of workers converges.
//
// # Formats
//
// The table above is format 3, the one this release writes: a membership
// record that names a table list's marker has V=3, one that names a rows
// index row of a generation V=2 (see membership). Format 2 is the same
// but for table lists, whose every change releases before wrote into the
// lines, with the values still to settle in S_; such a record is taken
// over (see listsToRows): a settled key's line is its live entry until
// its value changes, and is then hidden by a marker written dead (a
// legacy kill). Format 1 is format 2 but for rows: one row per key and
// value, keyed EscapeKey(pk)+" !"+EscapeKey(rk) and rewritten in place
// (tkGen, tkDead), and a record without V that lists the values still to
// settle in S_. Such a record is taken over (see fromFormat1), such a row
// is the key's live row until its value changes, and is then written
// dead. A record with V above 3 was written by a newer release and is
// left alone (ErrNewerFormat: Reconcile, Sync and rebuild fail,
// transiently, without writing). A key is listed under a value of a rows
// index while any of its rows there is live, whatever their format; of a
// table list while its entry of the highest generation, a line's or a
// marker's, is live (see markers).
//
// # Key format
//
// The format is part of the stored data: index keys written by one version
// must stay readable by every later one, so it changes only by adding new
// type letters, never by changing these.
//
// An encoded value is one type letter followed by the value's text:
//
//	letter  EDM type      text
//	B       Edm.Boolean   "0" for false, "1" for true
//	D       Edm.Double    16 lowercase hexadecimal digits (see below)
//	G       Edm.Guid      the lowercase 8-4-4-4-12 form (GUID.String)
//	I       Edm.Int32     sign-aware zero-padded decimal, width 10 (see below)
//	L       Edm.Int64     sign-aware zero-padded decimal, width 19 (see below)
//	S       Edm.String    the string escaped as EscapeKey does
//	T       Edm.DateTime  UTC as 2006-01-02T15:04:05.0000000Z (28 characters)
//	X       Edm.Binary    two lowercase hexadecimal digits per byte ("" when empty)
//
// Integers: a value v ≥ 0 is its decimal digits zero-padded to the width
// (Int32 42 is "I0000000042"); a negative v is "-" followed by v − min,
// zero-padded to the width, where min is the type's smallest value (Int32
// −1 is "I-2147483647", math.MinInt64 is "L-0000000000000000000"). "-"
// sorts below every digit, so negatives come first, in order.
//
// Doubles: the IEEE 754 bits b of the value as a uint64, with every bit
// inverted when the sign bit is set and only the sign bit set otherwise,
// written as 16 lowercase hexadecimal digits. -0 is encoded as +0
// ("D8000000000000000") and every NaN as the one key "Dfff8000000000000",
// which sorts after +Inf ("Dfff0000000000000"): two doubles get the same
// key exactly when they are equal as numbers (NaN counting as equal to
// NaN), which is what an index lookup needs. DecodeValue returns +0 for
// the key of -0.
//
// DateTimes: the instant in UTC, truncated to 100 ns as the stores keep it
// (storeadapter.DateTime), always with 7 fractional digits. Years must be
// 1601–9999, as for a stored property.
//
// Strings (EscapeKey): characters a key may not hold (/ \ # ? and the
// control characters U+0000–U+001F and U+007F–U+009F) are escaped, and so
// are the six escape characters themselves, so that escaped strings sort
// exactly as the originals do by UTF-16 code units
// (storeadapter.CompareUTF16). An escaped character c becomes its escape
// character followed by the two lowercase hexadecimal digits of c's code
// point. Each escape character and the characters it escapes form a run of
// consecutive code points that no unescaped character falls in, so an
// escape sequence sorts where the character it stands for did:
//
//	escape  escapes              examples
//	' '     U+0000–U+0020        space is " 20", tab " 09"
//	'"'     " #                  " is "\"22", # is "\"23"
//	'.'     . /                  . is ".2e", / is ".2f"
//	'>'     > ?                  > is ">3e", ? is ">3f"
//	'['     [ \                  [ is "[5b", \ is "[5c"
//	'~'     ~ U+007F–U+009F      ~ is "~7e", U+0085 "~85"
//
// Every other character stands for itself, so jonesj@contoso.com is
// "jonesj@contoso.2ecom". Escaping never turns two strings into one, and
// UnescapeKey accepts only the escaper's own output, so each string has
// exactly one escaped form. In escaped text a space is always followed by
// "0", "1" or "2", and the text never ends with a space or a dot. So " !"
// never occurs in escaped text and sorts below everything that can follow
// in it: escaped parts joined with " !" (a source entity's PartitionKey and
// RowKey, say) split back unambiguously at the first " !" and sort by the
// first part, then the next.
//
// Keys of different types sort by their type letter. Keys of one type sort
// as the values do: strings by UTF-16 code units, numbers numerically,
// false before true, DateTimes by instant, Guids by their lowercase text
// and binaries by their bytes. An encoded value is at most 512 characters
// long (Azure's key limit); a longer string or binary cannot be encoded.
//
// A property that is missing or null is not indexed: it has no encoding.
package indexes
