// Package storetest has test helpers for data directories: a snapshot of a
// tree's names, modes and contents, to prove that something left a
// directory untouched, a copy of a tree, and a small real file system
// (tmpfs) to fill up.
//
// It is for tests only; it knows nothing of the store's format.
package storetest
