// Command server is the server of the wait_for_ready example.
package main

import (
	"github.com/rdmarpc/rdmarpc/examples/features/internal/cli"
	"github.com/rdmarpc/rdmarpc/examples/features/wait_for_ready"
)

func main() { cli.Main(wait_for_ready.Server) }
