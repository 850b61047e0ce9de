package main

import (
	"io"
	"strings"
	"testing"
)

func TestSlotContext(t *testing.T) {
	for _, tc := range []struct {
		trained, ctx, slots int
		total, perSlot      int
		err                 string
	}{
		{trained: 2048, ctx: 0, slots: 1, total: 2048, perSlot: 2048},
		{trained: 1 << 20, ctx: 0, slots: 1, total: DefaultContext, perSlot: DefaultContext}, // never the file's maximum
		{trained: 1 << 20, ctx: 0, slots: 4, total: DefaultContext, perSlot: DefaultContext / 4},
		{trained: 8192, ctx: 8192, slots: 2, total: 8192, perSlot: 4096},
		{trained: 8192, ctx: 1001, slots: 2, total: 1001, perSlot: 500},
		{trained: 2048, ctx: 4096, slots: 1, err: "exceeds the model's trained context"},
		{trained: 2048, ctx: 16, slots: 4, err: "per slot"},
	} {
		total, per, err := slotContext(tc.trained, tc.ctx, tc.slots)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%+v: err %v, want %q", tc, err, tc.err)
			}
		case err != nil || total != tc.total || per != tc.perSlot:
			t.Errorf("%+v: got %d, %d, %v", tc, total, per, err)
		}
	}
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"-m", "x.gguf", "-np", "3", "-c", "300", "--embedding", "--max-body-bytes", "1024", "--t-max-predict-ms", "250", "--no-warmup"}, io.Discard)
	if err != nil || o.parallel != 3 || o.ctx != 300 || !o.embeddings || o.maxBody != 1024 || o.tMaxPredict != 250 {
		t.Fatalf("%+v %v", o, err)
	}
	for _, args := range [][]string{{"-m", "x", "-np", "0"}, {"-m", "x", "--max-body-bytes", "0"}, {"-np", "2"}} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}
