// Command demo runs tablekeeper's job kinds on the in-process store
// (localstore), with no Azure and no Node: it seeds the employee tables of
// the Azure Table design guide, enqueues archive moves, index jobs and
// high-volume deletes, drains them with the real runner and prints what
// each did and the storage calls it used. It sends its jobs through
// package client, as an application would (and one malformed message by
// hand, which the client would refuse). It is the README's first
// command:
//
//	go run ./cmd/demo
//
// It links localstore, which the worker binary does not.
//
// It may import the kinds, the catalog, the runner and localstore; it must
// not import the Azure SDK (it runs on localstore alone), and no other
// package may import it.
package main
