// Command client is the client of the health example.
package main

import (
	"github.com/rdmarpc/rdmarpc/examples/features/health"
	"github.com/rdmarpc/rdmarpc/examples/features/internal/cli"
)

func main() { cli.Main(health.Client) }
