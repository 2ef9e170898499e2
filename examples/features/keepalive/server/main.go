// Command server is the server of the keepalive example.
package main

import (
	"github.com/rdmarpc/rdmarpc/examples/features/internal/cli"
	"github.com/rdmarpc/rdmarpc/examples/features/keepalive"
)

func main() { cli.Main(keepalive.Server) }
