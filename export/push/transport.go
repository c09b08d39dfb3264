package push

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/heapscope/heapscope/export"
)

// ProfilesPath is the OTLP/HTTP path of the profiles signal.
const ProfilesPath = "/v1development/profiles"

// maxResponse bounds what is read of an HTTP response.
const maxResponse = 64 << 10

// retryableHTTP is what OTLP/HTTP says to retry (and Pyroscope's
// overloaded answers are the same).
func retryableHTTP(code int) bool {
	switch code {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// post sends body and classifies the answer.
func post(ctx context.Context, c *http.Client, u string, contentType string, hdr http.Header, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return errPermanent{err}
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := c.Do(req)
	if err != nil {
		return err // the network: retried
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if resp.StatusCode/100 == 2 {
		return nil
	}
	err = fmt.Errorf("%s: %s: %s", u, resp.Status, strings.TrimSpace(string(msg)))
	if retryableHTTP(resp.StatusCode) {
		return err
	}
	return errPermanent{err}
}

// otlpHTTP posts OTLP/HTTP protobuf.
type otlpHTTP struct {
	url    string
	client *http.Client
}

func newOTLPHTTP(u *url.URL) (*otlpHTTP, error) {
	v := *u
	if v.Path == "" || v.Path == "/" {
		v.Path = ProfilesPath
	}
	return &otlpHTTP{url: v.String(), client: &http.Client{}}, nil
}

func (t *otlpHTTP) encode(iv *export.Interval, o *export.Options) ([]message, error) {
	b, err := export.MarshalOTLP(iv, *o)
	if err != nil {
		return nil, err
	}
	return []message{{body: b}}, nil
}

func (t *otlpHTTP) send(ctx context.Context, m message) error {
	h := http.Header{}
	h.Set(pprofileotlp.DevelopmentVersionHeader, pprofileotlp.DevelopmentVersion)
	return post(ctx, t.client, t.url, "application/x-protobuf", h, m.body)
}

func (t *otlpHTTP) close() error {
	t.client.CloseIdleConnections()
	return nil
}

// otlpGRPC calls the OTLP profiles service.
type otlpGRPC struct {
	conn   *grpc.ClientConn
	client pprofileotlp.GRPCClient
}

func newGRPC(u *url.URL, maxBackoff time.Duration) (*otlpGRPC, error) {
	// gRPC reconnects on a backoff of its own, up to 2 minutes by
	// default: bound it as the Sender's retries are, so that a collector
	// that comes back is used as soon as a retry is due.
	bo := backoff.DefaultConfig
	bo.MaxDelay = maxBackoff
	conn, err := grpc.NewClient(u.Host, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: 5 * time.Second}))
	if err != nil {
		return nil, fmt.Errorf("push: %s: %w", u, err)
	}
	return &otlpGRPC{conn: conn, client: pprofileotlp.NewGRPCClient(conn)}, nil
}

func (t *otlpGRPC) encode(iv *export.Interval, o *export.Options) ([]message, error) {
	p, err := export.OTLP(iv, *o)
	if err != nil {
		return nil, err
	}
	p.MarkReadOnly() // the client copies it for each attempt
	return []message{{profiles: p}}, nil
}

func (t *otlpGRPC) send(ctx context.Context, m message) error {
	_, err := t.client.Export(ctx, pprofileotlp.NewExportRequestFromProfiles(m.profiles))
	if err == nil {
		return nil
	}
	switch status.Code(err) {
	case codes.Canceled, codes.DeadlineExceeded, codes.Aborted, codes.OutOfRange,
		codes.Unavailable, codes.DataLoss, codes.ResourceExhausted:
		return err
	}
	return errPermanent{err}
}

func (t *otlpGRPC) close() error { return t.conn.Close() }

// pyroscope posts pprof to /ingest, one process at a time.
type pyroscope struct {
	url    *url.URL
	client *http.Client
	config []byte // the sample-type config, JSON
}

func newPyroscope(u *url.URL) (*pyroscope, error) {
	v := *u
	if v.Path == "" || v.Path == "/" {
		v.Path = "/ingest"
	}
	cfg, err := json.Marshal(export.PyroscopeSampleTypes())
	if err != nil {
		return nil, err
	}
	return &pyroscope{url: &v, client: &http.Client{}, config: cfg}, nil
}

func (t *pyroscope) encode(iv *export.Interval, o *export.Options) ([]message, error) {
	var ms []message
	for i := range iv.Processes {
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		fw, err := mw.CreateFormFile("profile", "profile.pprof")
		if err != nil {
			return nil, err
		}
		if err := export.WritePprof(fw, iv, i, *o); err != nil {
			return nil, err
		}
		fw, err = mw.CreateFormFile("sample_type_config", "sample_type_config.json")
		if err != nil {
			return nil, err
		}
		if _, err := fw.Write(t.config); err != nil {
			return nil, err
		}
		if err := mw.Close(); err != nil {
			return nil, err
		}
		ms = append(ms, message{body: body.Bytes(), name: AppName(iv, &iv.Processes[i]), contentType: mw.FormDataContentType(),
			from: iv.Start, until: iv.End})
	}
	return ms, nil
}

func (t *pyroscope) send(ctx context.Context, m message) error {
	q := url.Values{}
	q.Set("name", m.name)
	q.Set("from", strconv.FormatInt(m.from.Unix(), 10))
	q.Set("until", strconv.FormatInt(max(m.until.Unix(), m.from.Unix()+1), 10))
	q.Set("format", "pprof")
	q.Set("spyName", "heapscope")
	u := *t.url
	u.RawQuery = q.Encode()
	return post(ctx, t.client, u.String(), m.contentType, nil, m.body)
}

func (t *pyroscope) close() error {
	t.client.CloseIdleConnections()
	return nil
}

// AppName is the Pyroscope application name of a process's profile:
// SERVICE{pid=PID,host=HOST}, the service being the process's Service or
// its executable's base name, with characters Pyroscope's name syntax
// reserves replaced by '_'.
func AppName(iv *export.Interval, p *export.Process) string {
	svc := p.Service
	if svc == "" {
		svc = p.ExeName()
	}
	if svc == "" {
		svc = "unknown"
	}
	labels := []string{"pid=" + strconv.FormatUint(uint64(p.PID), 10)}
	if iv.Host.Name != "" {
		labels = append(labels, "host="+clean(iv.Host.Name))
	}
	return clean(svc) + "{" + strings.Join(labels, ",") + "}"
}

func clean(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '{' || r == '}' || r == ',' || r == '=' || r == '"' || r == '|' || r <= ' ' || r == 0x7f:
			return '_'
		}
		return r
	}, s)
}
