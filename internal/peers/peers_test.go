package peers

import (
	"os"
	"regexp"
	"testing"
)

// TestContourPinnedInTools: the Contour the e2e and the bench run (built from tools/kube-oldest/go.mod by
// scripts/kube-binaries.sh --contour) is the Contour whose manifests the tests read (ContourVersion).
func TestContourPinnedInTools(t *testing.T) {
	b, err := os.ReadFile("../../tools/kube-oldest/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(ContourModule) + `\s+(v\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("tools/kube-oldest/go.mod requires no %s", ContourModule)
	}
	if got := string(m[1]); got != ContourVersion {
		t.Errorf("tools/kube-oldest/go.mod builds %s %s; the manifests read are %s (ContourVersion): change both", ContourModule, got, ContourVersion)
	}
}
