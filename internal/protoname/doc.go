// Package protoname bounds the protobuf names a peer sends: the symbols a
// client asks a reflection service about, and the names in the files a
// reflection service sends back.
//
// protoregistry finds a name by trying its dotted prefixes, longest first,
// hashing each whole, so one lookup of a name that is not there costs its
// parts times its length: a 1 MiB "a.a.a…" is 2^19 lookups of up to 1 MiB
// each, seconds of CPU. Check refuses, in time linear in the name, what is
// longer than MaxLen or has more than MaxParts parts, so that a lookup
// costs at most MaxParts times the name's length. CheckFile does the same
// for every name a file declares or refers to, and takes references only
// fully qualified (".pkg.Msg", as protoc writes them), which protodesc
// resolves with one lookup rather than one per enclosing scope.
//
// It knows nothing of the reflection protocol or of registries; the
// reflection service and cmd/rdmarpc's reflection client call it before
// they look a name up.
package protoname
