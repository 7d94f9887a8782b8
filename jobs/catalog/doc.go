// Package catalog is the one list of job kinds. Both commands use it: the
// worker registers every kind's worker (NewRegistry) and reads every
// kind's section of its config file (Config); the enqueue CLI decodes and
// validates what it sends with the kinds' own parsers (ArgsRegistry).
//
// A new kind is a new jobs/<kind>/ package (Args, Config, Worker), a field
// in Config and one line in the kinds list. The catalog must hold no rules
// of its own: arguments, defaults and validation belong to each kind.
//
// It must not import the runner, poison or the Azure SDK: it lists the
// kinds, it does not run them.
package catalog
