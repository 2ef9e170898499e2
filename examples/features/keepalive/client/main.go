// Command client is the client of the keepalive example.
package main

import (
	"github.com/rdmarpc/rdmarpc/examples/features/internal/cli"
	"github.com/rdmarpc/rdmarpc/examples/features/keepalive"
)

func main() { cli.Main(keepalive.Client) }
