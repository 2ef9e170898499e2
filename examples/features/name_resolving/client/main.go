// Command client is the client of the name_resolving example.
package main

import (
	"github.com/rdmarpc/rdmarpc/examples/features/internal/cli"
	"github.com/rdmarpc/rdmarpc/examples/features/name_resolving"
)

func main() { cli.Main(name_resolving.Client) }
