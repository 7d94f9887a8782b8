package storeadapter

import "strings"

// ReservedPrefix starts the RowKey of every row tablekeeper keeps in an
// application's tables: index entries and membership records ("~tk.c.",
// "~tk.h.", "~tk.l.", "~tk.m.", "~tk.t."), outbox rows ("~tk.o."). Such a
// row belongs to tablekeeper, not to the application: no scan of
// application data (archive, export, purge, blobsync reconcile, index
// rebuild, restore, copy) treats it as an entity, and the counts they
// report leave it out. Applications must not use RowKeys that start with
// it, and leave these rows out of their own scans with ApplicationRows.
const ReservedPrefix = "~tk."

// reservedEnd is the first key after every key that starts with
// ReservedPrefix: the prefix with its last character incremented ('.' is
// followed by '/').
const reservedEnd = "~tk/"

// IsReserved reports whether a RowKey belongs to tablekeeper (starts with
// ReservedPrefix): the one definition every scan of application data uses.
func IsReserved(rowKey string) bool { return strings.HasPrefix(rowKey, ReservedPrefix) }

// ApplicationRows narrows f to the application's rows: it adds
//
//	RowKey lt '~tk.' or RowKey ge '~tk/'
//
// so that the service never returns tablekeeper's reserved rows (see
// ReservedPrefix). The zero Filter becomes just that condition.
func ApplicationRows(f Filter) Filter {
	return And(f, Or(Compare("RowKey", Lt, ReservedPrefix), Compare("RowKey", Ge, reservedEnd)))
}

// ReservedRows selects the reserved rows whose RowKeys start with
// ReservedPrefix + sub (sub "" selects them all): RowKey ge prefix and lt
// the prefix with its last character incremented. sub must be ASCII
// letters and dots, as tablekeeper's own sub-prefixes are.
func ReservedRows(sub string) Filter {
	return KeyPrefix("RowKey", ReservedPrefix+sub)
}

// KeyPrefix selects the rows whose key property (PartitionKey or RowKey)
// starts with prefix: key ge prefix and lt the prefix with its last byte
// incremented. prefix must be non-empty and end with an ASCII character
// below U+007F, so that incrementing it stays a valid key of the same
// length that sorts right after every key with that prefix.
func KeyPrefix(key, prefix string) Filter {
	n := len(prefix)
	if n == 0 || prefix[n-1] >= 0x7e {
		return Filter{err: invalid("filter prefix", "%q must end with an ASCII character below '~'", prefix)}
	}
	end := prefix[:n-1] + string(prefix[n-1]+1)
	return And(Compare(key, Ge, prefix), Compare(key, Lt, end))
}
