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

func TestKeepColumns(t *testing.T) {
	doc := "| feature | needs | 1.0 | 2.0 |\n| --- | --- | --- | --- |\n| a | x | yes | no |\n| b | y | no | yes |\n\nafter\n"
	cols, err := Columns(doc, "| feature |")
	if err != nil || len(cols) != 4 || cols[3] != "2.0" {
		t.Errorf("Columns = %q, %v; want feature, needs, 1.0, 2.0", cols, err)
	}
	got, err := KeepColumns(doc, "| feature |", func(c string) bool { return c != "1.0" })
	want := "| feature | needs | 2.0 |\n| --- | --- | --- |\n| a | x | no |\n| b | y | yes |\n\nafter\n"
	if err != nil || got != want {
		t.Errorf("KeepColumns without 1.0:\n%s\n%v\nwant:\n%s", got, err, want)
	}
	if same, err := KeepColumns(doc, "| feature |", func(string) bool { return true }); err != nil || same != doc {
		t.Errorf("KeepColumns keeping all changed the document: %q, %v", same, err)
	}
	if _, err := KeepColumns(doc, "| mode |", nil); err == nil {
		t.Error("a missing table was accepted")
	}
}
