package events

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The Events are written with net/http, not client-go: one POST of one JSON object is all this package asks of
// the API server. client-go's REST client, its kubeconfig loader and the k8s.io/api types cost the drain side
// of the binary about 8 MB when it was measured (Go 1.26, CGO_ENABLED=0, -trimpath, -s -w), nearly doubling it;
// the k8s.io/api types alone about 5 MB, as does only importing k8s.io/api/core/v1; this file and access.go
// cost it about 0.5 MB, half of it the YAML decoder a kubeconfig needs. test/release holds the released pod
// binary to its budget. What client-go gave and these files do instead:
//   - credentials read from their files at each request: a rotated service account token, CA or client
//     certificate is used from the next Event on (client-go re-reads a token file once a minute, and a CA
//     never);
//   - proxies from HTTPS_PROXY and NO_PROXY, or the kubeconfig's proxy-url;
//   - HTTP/2 when the API server offers it, one connection kept between Events;
//   - another try (maxAttempts in all, within the request's timeout) when the API server answers 429 with a
//     Retry-After: API Priority and Fairness turned the request away before running it, so the Event cannot
//     be created twice. Other failures are not tried again, as the Event may have been created (client-go
//     also retries a 5xx that carries a Retry-After; the second try of an Event created would be refused as
//     AlreadyExists);
//   - the refusal's reason read from the meta/v1 Status the API server answers with (Forbidden, Invalid, …).
// Not done: exec and auth-provider credentials and impersonation in a kubeconfig (refused with a reason, see
// readKubeconfig); protobuf; client-side rate limiting (a drain sends two Events).

// apiEvent is the events.k8s.io/v1 Event sent to the API server: the fields this package sets, named as the
// API's JSON names them.
type apiEvent struct {
	APIVersion          string `json:"apiVersion"` // events.k8s.io/v1
	Kind                string `json:"kind"`       // Event
	objectMeta          `json:"metadata"`
	EventTime           microTime       `json:"eventTime"`
	Regarding           ObjectReference `json:"regarding"`
	ReportingController string          `json:"reportingController"`
	ReportingInstance   string          `json:"reportingInstance"`
	Action              string          `json:"action"`
	Reason              string          `json:"reason"`
	Note                string          `json:"note,omitempty"`
	Type                string          `json:"type"`
}

// objectMeta is the part of an object's metadata an Event is created with.
type objectMeta struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
}

// microTime is a time the API has to the microsecond (meta/v1 MicroTime): an Event's eventTime.
type microTime struct{ time.Time }

func (t microTime) MarshalJSON() ([]byte, error) {
	return json.Marshal(t.UTC().Format("2006-01-02T15:04:05.000000Z07:00"))
}

// status is the part of the meta/v1 Status the API server answers a refused request with that is read.
type status struct {
	Kind    string `json:"kind"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// apiError is the API server's refusal of a request: its HTTP status code and the reason of its Status
// ("Forbidden", "Invalid", "AlreadyExists", …), or one named after the code when the answer was no Status.
type apiError struct {
	code    int
	reason  string
	message string
}

func (e *apiError) Error() string { return e.message }

// refusal is the reason err says the API server refused a request for, or "Error" when the API server gave no
// answer (a network error, a timeout).
func refusal(err error) string {
	if ae, ok := errors.AsType[*apiError](err); ok {
		return ae.reason
	}
	return "Error"
}

// reasonOfCode names the reason of an answer that is not a Status (a proxy's, a load balancer's) by its HTTP
// code, as the API server's own Statuses name them; another 5xx is an InternalError.
var reasonOfCode = map[int]string{
	http.StatusBadRequest:            "BadRequest",
	http.StatusUnauthorized:          "Unauthorized",
	http.StatusForbidden:             "Forbidden",
	http.StatusNotFound:              "NotFound",
	http.StatusMethodNotAllowed:      "MethodNotAllowed",
	http.StatusConflict:              "Conflict",
	http.StatusRequestEntityTooLarge: "RequestEntityTooLarge",
	http.StatusUnsupportedMediaType:  "UnsupportedMediaType",
	http.StatusUnprocessableEntity:   "Invalid",
	http.StatusTooManyRequests:       "TooManyRequests",
	http.StatusInternalServerError:   "InternalError",
	http.StatusServiceUnavailable:    "ServiceUnavailable",
	http.StatusGatewayTimeout:        "Timeout",
}

// Bounds of a request:
//   - maxAnswer: an Event's answer is the Event (under 2 kB) or a Status; more is not read.
//   - maxAttempts: tries of one Event answered 429; each waits the Retry-After the API server asked for, and
//     all of them fit in RequestTimeout or the Event is dropped.
//   - idleTimeout: an idle connection is kept this long for the next Event (a drain's second Event comes
//     within its timeout, the webhook's at any time).
const (
	maxAnswer   = 64 << 10
	maxAttempts = 3
	idleTimeout = 90 * time.Second
)

// sender creates Events through the API server that access names. It is used by one goroutine at a time
// (the Client's), and keeps one transport for as long as the TLS material it was built from is unchanged.
type sender struct {
	access    access
	userAgent string
	transport *http.Transport
	tlsOf     string // the CA, certificate and key transport was built with
}

// newSender reads access's credentials once, so that a configuration that cannot work (a missing file, a CA
// without a certificate, a key that does not match) disables Events at New with the reason.
func newSender(a access, userAgent string) (*sender, error) {
	s := &sender{access: a, userAgent: userAgent}
	if _, _, err := s.credentials(); err != nil {
		return nil, err
	}
	return s, nil
}

// send creates ev in its namespace, trying again after a 429 answer as its Retry-After says, within ctx.
func (s *sender) send(ctx context.Context, ev *apiEvent) error {
	body, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encoding event %s: %w", ev.Reason, err)
	}
	for attempt := 1; ; attempt++ {
		wait, err := s.post(ctx, ev.Namespace, body)
		if err == nil {
			return nil
		}
		if wait < 0 || attempt == maxAttempts {
			return fmt.Errorf("creating event %s: %w", ev.Reason, err)
		}
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			return fmt.Errorf("creating event %s: %w (the API server asked to try again after %s)", ev.Reason, err, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("creating event %s: %w", ev.Reason, err)
		case <-t.C:
		}
	}
}

// post sends one request. wait is how long the API server asked to wait before trying again (a 429 answer
// with a Retry-After in seconds), or negative when the request is not to be tried again.
func (s *sender) post(ctx context.Context, namespace string, body []byte) (wait time.Duration, err error) {
	tr, token, err := s.credentials()
	if err != nil {
		return -1, err
	}
	u := strings.TrimRight(s.access.server, "/") + "/apis/events.k8s.io/v1/namespaces/" + url.PathEscape(namespace) + "/events"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return -1, fmt.Errorf("building the request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", s.userAgent)
	switch {
	case token != "":
		req.Header.Set("Authorization", "Bearer "+token)
	case s.access.username != "" || s.access.password != "":
		req.SetBasicAuth(s.access.username, s.access.password)
	}
	resp, err := (&http.Client{Transport: tr, Timeout: RequestTimeout}).Do(req)
	if err != nil {
		return -1, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if resp.StatusCode/100 == 2 {
		return -1, nil
	}
	if err != nil {
		return -1, fmt.Errorf("reading the answer (%s): %w", resp.Status, err)
	}
	wait = -1
	if resp.StatusCode == http.StatusTooManyRequests {
		if n, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && n >= 0 {
			wait = time.Duration(n) * time.Second
		}
	}
	return wait, answerError(resp.StatusCode, resp.Status, answer)
}

// answerError is the error of a refused request: the Status's reason and message, or else the code's.
func answerError(code int, statusLine string, answer []byte) *apiError {
	var st status
	if json.Unmarshal(answer, &st) == nil && st.Kind == "Status" && st.Reason != "" {
		return &apiError{code: code, reason: st.Reason, message: st.Message}
	}
	reason, ok := reasonOfCode[code]
	switch {
	case ok:
	case code >= 500:
		reason = "InternalError"
	default:
		reason = "Error" // as an answer that says nothing about the request
	}
	text := strings.TrimSpace(string(answer))
	if len(text) > 200 {
		text = text[:200] + " …"
	}
	if st.Message != "" {
		text = st.Message
	}
	return &apiError{code: code, reason: reason, message: fmt.Sprintf("the API server answered %s: %s", statusLine, text)}
}

// credentials reads the CA, client certificate and token as their files say now, and returns the transport
// for that CA and certificate (a new one when they changed) and the token.
func (s *sender) credentials() (*http.Transport, string, error) {
	a := s.access
	ca, err := a.ca.read()
	if err != nil {
		return nil, "", err
	}
	cert, err := a.cert.read()
	if err != nil {
		return nil, "", err
	}
	key, err := a.key.read()
	if err != nil {
		return nil, "", err
	}
	token, err := a.token.read()
	if err != nil {
		return nil, "", err
	}
	tlsOf := string(ca) + "\x00" + string(cert) + "\x00" + string(key)
	if s.transport == nil || tlsOf != s.tlsOf {
		tr, err := a.newTransport(ca, cert, key)
		if err != nil {
			return nil, "", err
		}
		if s.transport != nil {
			s.transport.CloseIdleConnections()
		}
		s.transport, s.tlsOf = tr, tlsOf
	}
	return s.transport, strings.TrimSpace(string(token)), nil
}

// newTransport is a transport that trusts ca (PEM; none: the system's roots) and presents cert and key (PEM),
// through a's proxy.
func (a access) newTransport(ca, cert, key []byte) (*http.Transport, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: a.serverName, InsecureSkipVerify: a.insecure}
	if len(ca) > 0 {
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(ca) {
			return nil, fmt.Errorf("no PEM certificate in the certificate authority %s", a.ca.name())
		}
	}
	if len(cert) > 0 || len(key) > 0 {
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("loading the client certificate %s and key %s: %w", a.cert.name(), a.key.name(), err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return &http.Transport{
		Proxy:               a.proxy,
		DialContext:         (&net.Dialer{Timeout: RequestTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     cfg,
		TLSHandshakeTimeout: RequestTimeout,
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     idleTimeout,
	}, nil
}
