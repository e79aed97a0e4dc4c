// Command attach appends the wall's init to a postern binary: attach POSTERN
// POSTERN-WALL. The Makefile runs it after each build of postern for Linux.
package main

import (
	"fmt"
	"os"

	"github.com/postern-dev/postern/internal/wallimage"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: attach POSTERN POSTERN-WALL")
		os.Exit(2)
	}
	if err := wallimage.Attach(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "attach:", err)
		os.Exit(1)
	}
}
