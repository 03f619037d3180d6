package kubetest

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
)

// Client sends objects to an APIServer from the test's own process, for the tests that send hundreds of them: a
// kubectl run costs about 0.13 CPU-s (its start, the kubeconfig, discovery), and test/policy's TestSameStoredPods
// alone ran kubectl 1,032 times, 133 of its 177 CPU-s (measured with a kubectl that timed itself). Where what
// kubectl does is the point (a page's command, `apply --dry-run=server` on our manifests), tests run kubectl.
type Client struct {
	s    *APIServer
	http *http.Client

	mu        sync.Mutex
	resources map[string]map[string]resource // group/version -> kind -> its resource (discovery, read once)
}

// resource is what a path needs of a kind: its plural name and whether it lives in a namespace.
type resource struct {
	name       string
	namespaced bool
}

// Client returns s's in-process client (one per APIServer).
func (s *APIServer) Client() *Client {
	s.clientOnce.Do(func() {
		s.client = &Client{s: s, resources: map[string]map[string]resource{}}
		pool := x509.NewCertPool()
		if pem, err := os.ReadFile(s.CAFile); err == nil {
			pool.AppendCertsFromPEM(pem)
		}
		s.client.http = &http.Client{Timeout: kubectlTimeout, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 8,
		}}
	})
	return s.client
}

// Create creates obj (any value that marshals to an object with apiVersion, kind and metadata) as `kubectl create
// -n ns -f` does: strict field validation, field manager kubectl-create, in ns unless its metadata names a
// namespace (ns is ignored for a kind without one); with dryRun, as --dry-run=server. It returns the object the API
// server stored (or would store), as JSON. A refusal is an error with the API server's message, as kubectl prints it.
func (c *Client) Create(ctx context.Context, ns string, obj any, dryRun bool) ([]byte, error) {
	body, path, err := c.locate(ctx, ns, obj, false)
	if err != nil {
		return nil, err
	}
	q := url.Values{"fieldManager": {"kubectl-create"}, "fieldValidation": {"Strict"}}
	if dryRun {
		q.Set("dryRun", "All")
	}
	return c.do(ctx, http.MethodPost, path, q, "application/json", body)
}

// Apply applies obj as `kubectl apply --server-side --force-conflicts -n ns -f` does: created or updated, its fields
// owned by the field manager kubectl, strict field validation.
func (c *Client) Apply(ctx context.Context, ns string, obj any) ([]byte, error) {
	body, path, err := c.locate(ctx, ns, obj, true)
	if err != nil {
		return nil, err
	}
	q := url.Values{"fieldManager": {"kubectl"}, "force": {"true"}, "fieldValidation": {"Strict"}}
	return c.do(ctx, http.MethodPatch, path, q, "application/apply-patch+yaml", body) // JSON is YAML
}

// locate marshals obj and returns it with its path: the collection's (create) or the object's (named).
func (c *Client) locate(ctx context.Context, ns string, obj any, named bool) ([]byte, string, error) {
	body, err := json.Marshal(obj)
	if err != nil {
		return nil, "", err
	}
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(body, &head); err != nil {
		return nil, "", err
	}
	r, err := c.resource(ctx, head.APIVersion, head.Kind)
	if err != nil {
		return nil, "", err
	}
	path := "/apis/" + head.APIVersion
	if !strings.Contains(head.APIVersion, "/") {
		path = "/api/" + head.APIVersion
	}
	if r.namespaced {
		switch {
		case head.Metadata.Namespace == "":
			head.Metadata.Namespace = ns
		case ns != "" && head.Metadata.Namespace != ns:
			return nil, "", fmt.Errorf("%s %s names namespace %s, not %s", head.Kind, head.Metadata.Name, head.Metadata.Namespace, ns)
		}
		if head.Metadata.Namespace == "" {
			return nil, "", fmt.Errorf("%s %s: no namespace", head.Kind, head.Metadata.Name)
		}
		path += "/namespaces/" + head.Metadata.Namespace
	}
	path += "/" + r.name
	if named {
		path += "/" + head.Metadata.Name
	}
	return body, path, nil
}

// resource finds kind's resource in apiVersion's discovery document, read once per group/version.
func (c *Client) resource(ctx context.Context, apiVersion, kind string) (resource, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	kinds, ok := c.resources[apiVersion]
	if !ok {
		path := "/apis/" + apiVersion
		if !strings.Contains(apiVersion, "/") {
			path = "/api/" + apiVersion
		}
		b, err := c.do(ctx, http.MethodGet, path, nil, "", nil)
		if err != nil {
			return resource{}, fmt.Errorf("discovering %s: %w", apiVersion, err)
		}
		var list struct {
			Resources []struct {
				Name       string `json:"name"`
				Kind       string `json:"kind"`
				Namespaced bool   `json:"namespaced"`
			} `json:"resources"`
		}
		if err := json.Unmarshal(b, &list); err != nil {
			return resource{}, fmt.Errorf("discovering %s: %w", apiVersion, err)
		}
		kinds = map[string]resource{}
		for _, r := range list.Resources {
			if !strings.Contains(r.Name, "/") { // not a subresource
				kinds[r.Kind] = resource{r.Name, r.Namespaced}
			}
		}
		c.resources[apiVersion] = kinds
	}
	r, ok := kinds[kind]
	if !ok {
		return resource{}, fmt.Errorf("the API server serves no kind %s in %s", kind, apiVersion)
	}
	return r, nil
}

// do sends one request as the admin and returns the answer's body; an answer other than 2xx is an error with the
// API server's message (its Status). Like the kubectl helpers it does not end when ctx is canceled (tb.Context()
// ends before the cleanups that may call it): kubectlTimeout bounds each request.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, contentType string, body []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), kubectlTimeout)
	defer cancel()
	u := c.s.URL + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.s.Token)
	req.Header.Set("Accept", "application/json")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var st struct {
			Reason  string `json:"reason"`
			Message string `json:"message"`
		}
		if json.Unmarshal(b, &st) == nil && st.Message != "" {
			return nil, fmt.Errorf("%s %s: Error from server (%s): %s", method, path, st.Reason, st.Message)
		}
		return nil, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	return b, nil
}
