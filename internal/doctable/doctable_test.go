package doctable

import "testing"

func TestSetColumn(t *testing.T) {
	doc := "# T\n\n| feature |\n|---|\n| a |\n| b |\n\nafter\n"
	got, err := SetColumn(doc, "| feature |", "1.0", map[string]string{"a": "yes", "b": "no"})
	if err != nil {
		t.Fatal(err)
	}
	want := "# T\n\n| feature | 1.0 |\n| --- | --- |\n| a | yes |\n| b | no |\n\nafter\n"
	if got != want {
		t.Errorf("added column:\n%s\nwant:\n%s", got, want)
	}
	again, err := SetColumn(got, "| feature |", "1.0", map[string]string{"a": "no"})
	if err != nil || again != "# T\n\n| feature | 1.0 |\n| --- | --- |\n| a | no |\n| b | no |\n\nafter\n" {
		t.Errorf("rewritten cell: %q, %v", again, err)
	}
	if _, err := SetColumn(doc, "| feature |", "1.0", map[string]string{"c": "yes"}); err == nil {
		t.Error("a row the table lacks was accepted")
	}
	if _, err := SetColumn(doc, "| mode |", "1.0", nil); err == nil {
		t.Error("a missing table was accepted")
	}
}
