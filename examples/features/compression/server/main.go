// Command server is the server of the compression example.
package main

import (
	"github.com/rdmarpc/rdmarpc/examples/features/compression"
	"github.com/rdmarpc/rdmarpc/examples/features/internal/cli"
)

func main() { cli.Main(compression.Server) }
