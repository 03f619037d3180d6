package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Reader reads objects from the API server with the access Events are sent with: a kubeconfig's context, or
// the pod's service account. It is the webhook's audit's connection (in its pod: the webhook's service
// account): GETs of JSON and Events it waits for, on the same transport, credentials and error reasons as the
// drain's Events. (The kubectl plugin connects with client-go instead: internal/kubeapi.) Safe for concurrent
// use.
type Reader struct {
	mu sync.Mutex // the sender's transport is built on first use and when the credentials change
	s  *sender
	// Namespace is the context's namespace, or the pod's own in a cluster; empty when neither says one.
	Namespace string
	// Server is the API server's URL.
	Server string
}

// maxObject bounds one GET's answer: a page of a list (the plugin asks for at most 500 items a page).
const maxObject = 64 << 20

// NewReader reads the access of kubeconfig's context (empty: its current context), or, with kubeconfig
// empty, the in-cluster access of the pod's service account. What of a kubeconfig is read is readKubeconfig's;
// exec and auth-provider credentials and impersonation are refused.
func NewReader(kubeconfig, context, userAgent string) (*Reader, error) {
	var a access
	var err error
	switch {
	case kubeconfig != "":
		if a, err = readKubeconfigContext(kubeconfig, context); err != nil {
			return nil, fmt.Errorf("reading kubeconfig %s: %w", kubeconfig, err)
		}
	case context != "":
		return nil, errors.New("a context needs a kubeconfig")
	default:
		if a, err = inCluster(serviceAccountDir); err != nil {
			return nil, err
		}
		if ns, err := os.ReadFile(filepath.Join(serviceAccountDir, "namespace")); err == nil {
			a.namespace = strings.TrimSpace(string(ns))
		}
	}
	s, err := newSender(a, userAgent)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's credentials: %w", err)
	}
	return &Reader{s: s, Namespace: a.namespace, Server: a.server}, nil
}

// NotFound reports whether err is the API server's answer that the object does not exist.
func NotFound(err error) bool {
	ae, ok := errors.AsType[*apiError](err)
	return ok && ae.code == http.StatusNotFound
}

// Get GETs path (as /api/v1/namespaces/NS/pods) with query and returns the answer's body; an answer other than
// 2xx is an error carrying the API server's reason and message (NotFound tells a missing object).
func (r *Reader) Get(ctx context.Context, path string, query url.Values) ([]byte, error) {
	r.mu.Lock()
	tr, token, err := r.s.credentials()
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	u := strings.TrimRight(r.s.access.server, "/") + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("building the request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", r.s.userAgent)
	switch {
	case token != "":
		req.Header.Set("Authorization", "Bearer "+token)
	case r.s.access.username != "" || r.s.access.password != "":
		req.SetBasicAuth(r.s.access.username, r.s.access.password)
	}
	resp, err := (&http.Client{Transport: tr, Timeout: ReadTimeout}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxObject+1))
	if err != nil {
		return nil, fmt.Errorf("reading the answer to GET %s (%s): %w", path, resp.Status, err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("GET %s: %w", path, answerError(resp.StatusCode, resp.Status, answer))
	}
	if len(answer) > maxObject {
		return nil, fmt.Errorf("GET %s: the answer is over %d MiB", path, maxObject>>20)
	}
	return answer, nil
}

// CreateEvent records e, which must name its object (Event.Regarding), in that object's namespace, with
// instance as its reportingInstance (at most 128 bytes kept), and returns when the API server has answered:
// nil once the Event is stored. Unlike Client.Record it waits, so that a caller that records an Event once per
// object knows whether it was. A 429 answer is tried again as Client's Events are; ctx bounds it all.
func (r *Reader) CreateEvent(ctx context.Context, e Event, instance string) error {
	if e.Regarding == nil {
		return fmt.Errorf("event %s names no object", e.Reason)
	}
	if len(instance) > 128 {
		instance = instance[:128]
	}
	ev := newAPIEvent(e, *e.Regarding, instance, time.Now())
	ctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	r.mu.Lock() // the sender rebuilds its transport when the credentials change
	defer r.mu.Unlock()
	return r.s.send(ctx, &ev)
}

// ReadTimeout bounds one GET, connection included: a page of 500 pods from a busy API server.
const ReadTimeout = 30 * time.Second

// Getter GETs a path of the API server with a query: a *Reader, or a test's fake.
type Getter interface {
	Get(ctx context.Context, path string, query url.Values) ([]byte, error)
}

// EachPage GETs every page of the list at path (q: its query; its "continue" is set page by page) and hands
// each page's items, undecoded, to fn.
func EachPage(ctx context.Context, api Getter, path string, q url.Values, fn func(items json.RawMessage) error) error {
	q = maps.Clone(q)
	if q == nil {
		q = url.Values{}
	}
	for {
		b, err := api.Get(ctx, path, q)
		if err != nil {
			return err
		}
		var list struct {
			Metadata struct {
				Continue string `json:"continue"`
			} `json:"metadata"`
			Items json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(b, &list); err != nil {
			return fmt.Errorf("decoding %s: %w", path, err)
		}
		if len(list.Items) > 0 {
			if err := fn(list.Items); err != nil {
				return fmt.Errorf("decoding %s: %w", path, err)
			}
		}
		if list.Metadata.Continue == "" {
			return nil
		}
		q.Set("continue", list.Metadata.Continue)
	}
}
