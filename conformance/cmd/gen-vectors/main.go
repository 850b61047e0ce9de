// Command gen-vectors regenerates the mesh/1 conformance vectors:
//
//	go run ./conformance/cmd/gen-vectors conformance/v1
package main

import (
	"context"
	"fmt"
	"os"

	"meshd/conformance"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gen-vectors <dir>   (writes <dir>/reference/ and <dir>/receipts/)")
		os.Exit(2)
	}
	scratch, err := os.MkdirTemp("", "gen-vectors-")
	if err == nil {
		defer os.RemoveAll(scratch)
		var v *conformance.Vectors
		if v, err = conformance.Generate(context.Background(), scratch); err == nil {
			err = v.Write(os.Args[1])
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen-vectors:", err)
		os.Exit(1)
	}
}
