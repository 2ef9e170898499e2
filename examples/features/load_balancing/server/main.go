// Command server is the server of the load_balancing example.
package main

import (
	"github.com/rdmarpc/rdmarpc/examples/features/internal/cli"
	"github.com/rdmarpc/rdmarpc/examples/features/load_balancing"
)

func main() { cli.Main(load_balancing.Server) }
