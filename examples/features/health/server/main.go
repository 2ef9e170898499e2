// Command server is the server of the health example.
package main

import (
	"github.com/rdmarpc/rdmarpc/examples/features/health"
	"github.com/rdmarpc/rdmarpc/examples/features/internal/cli"
)

func main() { cli.Main(health.Server) }
