// Package netfault gives tests the network faults a storage client must
// survive: Silent, an endpoint that accepts connections and never answers
// (a black-holed network, a broken proxy).
//
// It must not import anything of the module: the tests of any package may
// use it.
package netfault
