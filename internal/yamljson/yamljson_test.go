package yamljson

import (
	"errors"
	"reflect"
	"testing"

	sigsyaml "sigs.k8s.io/yaml"
)

// bootstrap and kubeconfig have the shapes the product reads (envoyadmin.AdminFromBootstrap, events'
// kubeconfig): strings, a bool, bytes, lists, an interface, pointers.
type bootstrap struct {
	Admin *struct {
		Address *struct {
			SocketAddress *struct {
				Address   string `json:"address"`
				PortValue any    `json:"port_value"`
			} `json:"socket_address"`
			Pipe *struct {
				Path string `json:"path"`
			} `json:"pipe"`
		} `json:"address"`
	} `json:"admin"`
}

type kubeconfig struct {
	CurrentContext string `json:"current-context"`
	Clusters       []struct {
		Name    string `json:"name"`
		Cluster struct {
			Server   string `json:"server"`
			Insecure bool   `json:"insecure-skip-tls-verify"`
			CAData   []byte `json:"certificate-authority-data"`
		} `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string `json:"name"`
		User struct {
			Password string    `json:"password"`
			Exec     *struct{} `json:"exec"`
			Groups   []string  `json:"as-groups"`
		} `json:"user"`
	} `json:"users"`
	Extensions map[string]string `json:"extensions"`
}

var seeds = []string{
	"",
	"admin:\n  address:\n    socket_address: {address: 0.0.0.0, port_value: 9901}\n",
	`{"admin":{"address":{"pipe":{"path":"/tmp/admin.sock"}}}}`,
	"admin: {address: {socket_address: {address: 127.0.0.1, port_value: \"9901\"}}}\n",
	"current-context: a\nclusters:\n- name: 1\n  cluster: {server: https://k, insecure-skip-tls-verify: true, certificate-authority-data: aGVsbG8=}\n" +
		"users:\n- name: u\n  user: {password: 1234, as-groups: [1, true, x], exec: {}}\nextensions: {a: 1.5, 2: no}\n",
	"CURRENT-CONTEXT: 3\nClusters: []\n",
	"- a\n- 1\n",
	"1: 2\n1.5: x\ntrue: y\n",
	"a: [unclosed\n",
	"users: 5\n",
}

// check holds Unmarshal to sigs.k8s.io/yaml's Unmarshal for one document into a new value of v's type: the
// same error or not, the same value.
func check[T any](t *testing.T, doc string) {
	t.Helper()
	var got, want T
	gotErr := Unmarshal([]byte(doc), &got)
	if errors.Is(gotErr, ErrKeyCollision) {
		// sigs.k8s.io/yaml's value for such a document depends on Go's map order (either key may win), so there
		// is nothing to compare; the collision itself is checked in TestKeyCollision.
		return
	}
	wantErr := sigsyaml.Unmarshal([]byte(doc), &want)
	if (gotErr != nil) != (wantErr != nil) {
		t.Fatalf("%T from %q: err %v, sigs.k8s.io/yaml's %v", got, doc, gotErr, wantErr)
	}
	if gotErr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%T from %q:\n got %#v\nwant %#v (sigs.k8s.io/yaml)", got, doc, got, want)
	}
}

// Two keys that become one JSON key are refused, whatever the order yaml.v2's map gives them (the fuzzer found
// sigs.k8s.io/yaml keeping either, from run to run).
func TestKeyCollision(t *testing.T) {
	for _, doc := range []string{"0:\n! 0: Y\n", "true: 1\n\"true\": 2\n", "1.5: a\n\"1.5\": b\n", "a: {0: x, \"0\": y}\n"} {
		for range 20 {
			var v any
			if err := Unmarshal([]byte(doc), &v); !errors.Is(err, ErrKeyCollision) {
				t.Fatalf("%q: err %v, want ErrKeyCollision", doc, err)
			}
		}
	}
	var v map[string]any
	if err := Unmarshal([]byte("0: a\n\"1\": b\n"), &v); err != nil || len(v) != 2 {
		t.Errorf("keys that stay apart: %v, %v", v, err)
	}
}

func TestUnmarshalAsSigsYAML(t *testing.T) {
	for _, doc := range seeds {
		check[bootstrap](t, doc)
		check[kubeconfig](t, doc)
		check[any](t, doc)
	}
}

func FuzzUnmarshal(f *testing.F) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		check[bootstrap](t, doc)
		check[kubeconfig](t, doc)
		check[any](t, doc)
	})
}

// TestJSONToYAMLAsSigsYAML: the YAML of status -o yaml is sigs.k8s.io/yaml's, byte for byte.
func TestJSONToYAMLAsSigsYAML(t *testing.T) {
	for _, j := range []string{`{}`, `null`, `{"b":1,"a":[1.5,"x",true,null,{"z":"1"}],"c":{"d":"-"}}`,
		`{"groups":[{"listeners":["l1"],"active":0,"deadline":"2026-11-26T21:00:00Z"}],"state":"LIVE"}`, `[1, 2`} {
		got, gotErr := JSONToYAML([]byte(j))
		want, wantErr := sigsyaml.JSONToYAML([]byte(j))
		if (gotErr != nil) != (wantErr != nil) || string(got) != string(want) {
			t.Errorf("JSONToYAML(%s) = %q, %v; sigs.k8s.io/yaml's %q, %v", j, got, gotErr, want, wantErr)
		}
	}
}
