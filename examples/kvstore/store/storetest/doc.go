// Package storetest has test helpers for data directories: a snapshot of a
// tree's names, modes and contents, to prove that something left a
// directory untouched, and a copy of a tree.
//
// It is for tests only; it knows nothing of the store's format.
package storetest
