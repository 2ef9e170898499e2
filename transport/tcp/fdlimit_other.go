//go:build !unix

package tcp

func fdLimit() int { return 0 }
