package bench

// CSV tables of a verified report: a row per summary cell, a row per receipt.

import (
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"meshd/steward"
)

// CSV writes summary.csv (WriteSummaryCSV) and receipts.csv
// (WriteReceiptsCSV) of v into dir, which must exist, and returns the
// files written (those before a failure, with it).
func CSV(dir string, v *Verified) ([]string, error) {
	var files []string
	for _, f := range []struct {
		name  string
		write func(io.Writer, *Verified) error
	}{{"summary.csv", WriteSummaryCSV}, {"receipts.csv", WriteReceiptsCSV}} {
		path := filepath.Join(dir, f.name)
		fh, err := os.Create(path)
		if err != nil {
			return files, fmt.Errorf("bench csv: %w", err)
		}
		err = f.write(fh, v)
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return files, fmt.Errorf("bench csv: %s: %w", path, err)
		}
		files = append(files, path)
	}
	return files, nil
}

func statCols(s *Stats) []string {
	if s == nil {
		return []string{"", "", "", "", "", ""}
	}
	return []string{s.Median.String(), s.Q1.String(), s.Q3.String(), s.IQR.String(), s.Min.String(), s.Max.String()}
}

func boundCols(b *Interval) []string {
	if b == nil {
		return []string{"", ""}
	}
	return []string{b.Low.String(), b.High.String()}
}

func ciCols(c *MedianCI) []string {
	if c == nil {
		return []string{"", "", ""}
	}
	return []string{c.Lo.String(), c.Hi.String(), strconv.FormatInt(c.ConfidencePPM, 10)}
}

// WriteSummaryCSV writes one row per cell, every summary figure, and
// whether the run is complete (an incomplete run's rows say so each).
func WriteSummaryCSV(w io.Writer, v *Verified) error {
	cw := csv.NewWriter(w)
	head := []string{"board", "recipe", "prompt_words", "max_tokens", "serves", "counted", "tokens_in", "tokens_out"}
	for _, f := range []string{"gross", "net", "error", "tokens_per_s", "ttft_ms"} {
		for _, s := range []string{"median", "q1", "q3", "iqr", "min", "max"} {
			head = append(head, f+"_"+s)
		}
	}
	head = append(head, "gross_median_low", "gross_median_high", "net_median_low", "net_median_high", "provenance", "idle_uw",
		"gross_ci_low", "gross_ci_high", "gross_ci_confidence_ppm", "net_ci_low", "net_ci_high", "net_ci_confidence_ppm",
		"stat_uj_per_token", "meter_kinds", "run")
	cw.Write(head)
	b := &v.Report.Body
	idle := ""
	if b.Summary.IdleUW != nil {
		idle = strconv.FormatUint(*b.Summary.IdleUW, 10)
	}
	for _, c := range b.Summary.Cells {
		row := []string{v.Node.Label(), b.Workload.Model.Resolved, strconv.Itoa(c.PromptWords), strconv.Itoa(c.MaxTokens),
			strconv.Itoa(c.Serves), strconv.Itoa(c.Counted), c.TokensIn.String(), c.TokensOut.String()}
		for _, s := range []*Stats{c.Gross, c.Net, c.ErrorPerToken, c.TokensPerS, c.TTFTMs} {
			row = append(row, statCols(s)...)
		}
		row = append(row, boundCols(c.GrossMedianBound)...)
		row = append(row, boundCols(c.NetMedianBound)...)
		row = append(row, ProvenanceText(c.Provenance), idle)
		row = append(row, ciCols(c.GrossMedianCI)...)
		row = append(row, ciCols(c.NetMedianCI)...)
		stat, kinds := "", ""
		if c.StatPerToken != nil {
			stat = c.StatPerToken.String()
		}
		if len(c.MeterKinds) > 0 {
			kinds = ProvenanceText(c.MeterKinds)
		}
		run := "complete"
		if note := IncompleteText(b.Status); note != "" {
			run = note
		}
		row = append(row, stat, kinds, run)
		cw.Write(row)
	}
	cw.Flush()
	return cw.Error()
}

func optStat(r *steward.Receipt) string {
	if v, ok := statUJ(r); ok {
		return strconv.FormatUint(v, 10)
	}
	return ""
}

// WriteReceiptsCSV writes every receipt of the chain segment, with the
// serve it answers (empty for other clients' receipts).
func WriteReceiptsCSV(w io.Writer, v *Verified) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"sequence", "id", "serve", "warmup", "prompt_words", "max_tokens", "rep", "backend", "recipe",
		"tokens_in", "tokens_out", "tokens_accepted", "charged_uj", "estimated_uj", "measured_uj", "uj_per_accepted_token",
		"provenance", "meter", "meter_kind", "error_uj", "window_ns", "serve_ns", "sealed_unix_ms", "idle_uw", "shared", "first_token_ns", "stat_uj", "envelope"})
	serveOf := map[uint64]*Serve{}
	for i := range v.Report.Body.Serves {
		serveOf[v.Report.Body.Serves[i].Sequence] = &v.Report.Body.Serves[i]
	}
	opt := func(p *uint64) string {
		if p == nil {
			return ""
		}
		return strconv.FormatUint(*p, 10)
	}
	for i, o := range v.Receipts {
		r := o.Receipt
		charged := ""
		if e, err := r.Energy(); err == nil {
			charged = strconv.FormatUint(e.UJ(), 10)
		}
		serve, warm, pw, mt, rep := "", "", "", "", ""
		if s := serveOf[r.Sequence]; s != nil {
			serve, warm, pw, mt, rep = strconv.Itoa(s.Index), strconv.FormatBool(s.Warmup), strconv.Itoa(s.PromptWords), strconv.Itoa(s.MaxTokens), strconv.Itoa(s.Rep)
		}
		meter, kind := "", ""
		if r.Meter != nil {
			meter = *r.Meter
		}
		if r.MeterKind != nil {
			kind = *r.MeterKind
		}
		cw.Write([]string{strconv.FormatUint(r.Sequence, 10), o.ID.String(), serve, warm, pw, mt, rep, r.Backend, r.Recipe,
			strconv.Itoa(int(r.TokensIn)), strconv.Itoa(int(r.TokensOut)), strconv.Itoa(int(r.TokensAccepted)), charged,
			strconv.FormatUint(r.EstimatedUJ, 10), opt(r.MeasuredUJ), opt(r.UJPerAcceptedToken), r.EnergyProvenance, meter, kind,
			opt(r.ErrorUJ), opt(r.WindowNs), opt(r.ServeNs), opt(r.SealedUnixMs), opt(r.IdleUW), opt(r.Shared),
			opt(r.FirstTokenNs), optStat(r), v.Report.Body.Chain.Envelopes[i]})
	}
	cw.Flush()
	return cw.Error()
}
