// Command server is the server of the retry example.
package main

import (
	"github.com/rdmarpc/rdmarpc/examples/features/internal/cli"
	"github.com/rdmarpc/rdmarpc/examples/features/retry"
)

func main() { cli.Main(retry.Server) }
