package callgrind

//go:noescape
func request(args *[6]uint64) uint64
