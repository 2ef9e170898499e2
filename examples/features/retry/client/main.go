// Command client is the client of the retry example.
package main

import (
	"github.com/rdmarpc/rdmarpc/examples/features/internal/cli"
	"github.com/rdmarpc/rdmarpc/examples/features/retry"
)

func main() { cli.Main(retry.Client) }
