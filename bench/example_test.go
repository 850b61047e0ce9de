package bench_test

import (
	"fmt"
	"os"

	"meshd/bench"
	"meshd/steward"
)

// A program verifying a report a board published, pinned to the steward
// key the board's operator announced: a report verifies only if every
// envelope, link, figure and signature in it does.
func ExampleVerify() {
	data, err := os.ReadFile("report.json")
	if err != nil {
		fmt.Println(err)
		return
	}
	trusted, err := steward.ParsePublicKey("1f0c9a4f6d2e8b7c5a3d1e0f9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c")
	if err != nil {
		fmt.Println(err)
		return
	}
	if bench.Kind(data) == bench.FleetKind {
		fmt.Println("a fleet report: verify it with bench.VerifyFleet")
		return
	}
	v, problems := bench.Verify(data, trusted)
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Printf("%s: %s\n", p.Place, p.What)
		}
		return
	}
	for _, c := range v.Report.Body.Summary.Cells {
		fmt.Printf("%s on %s: %s µJ/token, bound %s, %s\n", bench.Cell{Prompt: c.PromptWords, Output: c.MaxTokens},
			v.Node.Label(), c.Gross.Median, bench.BoundText(c.GrossMedianBound), bench.ProvenanceText(c.Provenance))
	}
}
