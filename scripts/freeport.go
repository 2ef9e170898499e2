//go:build ignore

// freeport prints a TCP port on 127.0.0.1 that was free a moment ago.
package main

import (
	"fmt"
	"net"
)

func main() {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	fmt.Println(l.Addr().(*net.TCPAddr).Port)
}
