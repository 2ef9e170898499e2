// Command client is the client of the load_balancing example.
package main

import (
	"github.com/rdmarpc/rdmarpc/examples/features/internal/cli"
	"github.com/rdmarpc/rdmarpc/examples/features/load_balancing"
)

func main() { cli.Main(load_balancing.Client) }
