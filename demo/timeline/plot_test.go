package main

import (
	"os"
	"testing"
)

// TestCommittedPicture: docs/timeline.svg is what plot makes of the recorded run in docs/timeline/, so the
// README's picture cannot drift from its data (re-record, then: go run ./demo/timeline plot).
func TestCommittedPicture(t *testing.T) {
	got, err := plotDir("../../docs/timeline")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("../../docs/timeline.svg")
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Error("docs/timeline.svg is not what plot draws from docs/timeline/: run go run ./demo/timeline plot")
	}
}
