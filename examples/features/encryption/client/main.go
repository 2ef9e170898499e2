// Command client is the client of the encryption example.
package main

import (
	"github.com/rdmarpc/rdmarpc/examples/features/encryption"
	"github.com/rdmarpc/rdmarpc/examples/features/internal/cli"
)

func main() { cli.Main(encryption.Client) }
