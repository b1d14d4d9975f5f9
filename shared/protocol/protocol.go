// Package protocol is the runner protocol on the wire: one request and one
// answer type for every route, the error body, and the table from error
// codes to HTTP statuses. The server (package api) and the runner (package
// client) both use these types, so renaming a field breaks the build, not
// the wire. docs/runner-protocol.md describes the same routes; a test holds
// the two together.
package protocol

import (
	"math"
	"strings"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
)

// Paths of the routes that name no job.
const (
	PathRegister = "/v1/runners/register"
	PathClaim    = "/v1/runner/claim"
)

// Job-scoped routes live under /v1/runner/jobs/{job_id}/.
const (
	RouteHeartbeat      = "heartbeat"
	RouteSource         = "source"
	RouteLogs           = "logs"
	RouteArtifacts      = "artifacts"
	RouteArtifactCommit = "artifacts/commit"
	RouteArtifactFetch  = "artifacts/fetch"
	RouteCacheRestore   = "cache/restore"
	RouteCacheSave      = "cache/save"
	RouteCacheCommit    = "cache/commit"
	RouteOutputs        = "outputs"
	RouteReport         = "report"
	RouteComplete       = "complete"
)

// JobPattern is the net/http pattern of a job-scoped route.
func JobPattern(route string) string { return "/v1/runner/jobs/{job_id}/" + route }

// JobPath is the path of a job-scoped route for one job.
func JobPath(jobID, route string) string { return "/v1/runner/jobs/" + jobID + "/" + route }

// MaxClaimWait bounds a claim's long poll (wait_seconds 0-20).
const MaxClaimWait = 20 * time.Second

// MaxBlobBytes is the largest artifact or cache blob (one S3 PUT).
const MaxBlobBytes = 5 << 30

// RegisterRequest exchanges a single-use registration token for a runner.
type RegisterRequest struct {
	RegistrationToken string   `json:"registration_token"`
	Name              string   `json:"name"`
	Labels            []string `json:"labels"`
}

// Validate checks the fields the store does not.
func (r *RegisterRequest) Validate() error {
	if r.RegistrationToken == "" {
		return domain.Errorf(domain.EInvalid, "field registration_token is required")
	}
	return nil
}

// RegisterResponse is the runner's identity; the token is shown only here.
type RegisterResponse struct {
	RunnerID string `json:"runner_id"`
	Token    string `json:"token"`
}

// ClaimRequest long-polls for a job.
type ClaimRequest struct {
	Labels      []string `json:"labels"`
	WaitSeconds int      `json:"wait_seconds"`
	// Features are what the runner can do (domain.Feature*); a job that
	// needs a feature is handed only to runners that declare it. Absent:
	// only jobs that need none.
	Features []string `json:"features,omitempty"`
	// Version and Slots say what the runner is (shown to admins):
	// its build, and how many jobs it runs at once.
	Version string `json:"version,omitempty"`
	Slots   int    `json:"slots,omitempty"`
	// QueueHint, when present (even empty), asks for an idle poll
	// (docs/runner-protocol.md "Idle polls"): the token of the last
	// answer's HeaderQueueHint. While nothing was queued since, the
	// answer comes without a database query, after at most WaitSeconds or
	// at once, and says when to ask again (HeaderPollAfter).
	QueueHint *string `json:"queue_hint,omitempty"`
}

// Headers of a claim's 204 answer to an idle poll.
const (
	// HeaderQueueHint is the token to send as queue_hint next time
	// (absent: none yet, send "").
	HeaderQueueHint = "X-Forgeci-Queue-Hint"
	// HeaderPollAfter is how many seconds to wait before the next claim.
	HeaderPollAfter = "X-Forgeci-Poll-After"
)

// maxQueueHint bounds queue_hint (tokens are 24 hex digits).
const maxQueueHint = 64

// validVersion is a runner's version as shown: printable, short.
func validVersion(v string) bool { return len(v) <= 64 && domain.OnlyChars(v, "._+:@-") }

// Validate checks the wait and the features.
func (r *ClaimRequest) Validate() error {
	if !validVersion(r.Version) || r.Slots < 0 || r.Slots > 1024 {
		return domain.Errorf(domain.EInvalid, "version is at most 64 letters, digits and . _ + : @ -; slots from 0 to 1024")
	}
	if r.WaitSeconds < 0 || time.Duration(r.WaitSeconds)*time.Second > MaxClaimWait {
		return domain.Errorf(domain.EInvalid, "wait_seconds must be between 0 and %d", int(MaxClaimWait.Seconds()))
	}
	if r.QueueHint != nil && len(*r.QueueHint) > maxQueueHint {
		return domain.Errorf(domain.EInvalid, "queue_hint is at most %d characters", maxQueueHint)
	}
	if len(r.Features) > 32 {
		return domain.Errorf(domain.EInvalid, "field features may list at most 32 features")
	}
	for _, f := range r.Features {
		if f == "" || len(f) > 64 {
			return domain.Errorf(domain.EInvalid, "every feature must be 1 to 64 characters")
		}
	}
	return nil
}

// ClaimOf is a granted lease: the lease, what to run, and on what source.
// J is the job object: the server passes the stored job through as raw
// JSON (ClaimOf[json.RawMessage]); the runner decodes it (Claim). One
// declaration keeps both sides' fields equal.
type ClaimOf[J any] struct {
	Lease  domain.Lease  `json:"lease"`
	Job    J             `json:"job"`
	Source domain.Source `json:"source"`
	// LeaseTTLSeconds tells the runner how often to heartbeat (a third of
	// it) and when to give up on its own, measured on its monotonic clock,
	// so that a runner whose wall clock is wrong still behaves.
	LeaseTTLSeconds int `json:"lease_ttl_seconds"`
	// Secrets are the secrets the job lists by name (secrets: [...]), for
	// its environment; absent for an untrusted run.
	Secrets map[string]string `json:"secrets,omitempty"`
	// Mask holds every secret value this claim carries, in Secrets or
	// substituted into the job for ${{ secrets.NAME }}: the runner redacts
	// them from the log.
	Mask []string `json:"mask,omitempty"`
}

// Claim is a claim as the runner decodes it.
type Claim = ClaimOf[domain.ClaimedJob]

// Leased is the part every job-scoped request shares.
type Leased struct {
	Lease *domain.Lease `json:"lease"`
}

// LeaseTuple returns the validated lease the request carries.
func (l *Leased) LeaseTuple() (domain.Lease, error) {
	if err := l.Lease.Validate(); err != nil {
		return domain.Lease{}, err
	}
	return *l.Lease, nil
}

// WithLease returns the tuple a runner sends: the lease without its
// informative expiry.
func WithLease(l domain.Lease) Leased {
	l.ExpiresAt = nil
	return Leased{Lease: &l}
}

// LeasedRequest is implemented by every job-scoped request.
type LeasedRequest interface {
	LeaseTuple() (domain.Lease, error)
	Validate() error
}

// HeartbeatRequest extends the lease.
type HeartbeatRequest struct{ Leased }

// Validate has nothing beyond the lease to check.
func (*HeartbeatRequest) Validate() error { return nil }

// HeartbeatResponse is the new expiry and whether a user asked to cancel.
type HeartbeatResponse struct {
	ExpiresAt       time.Time `json:"expires_at"`
	CancelRequested bool      `json:"cancel_requested"`
}

// SourceRequest asks where to download the run's snapshot.
type SourceRequest struct{ Leased }

// Validate has nothing beyond the lease to check.
func (*SourceRequest) Validate() error { return nil }

// SourceResponse is a presigned GET of the snapshot and the digests it
// must have.
type SourceResponse struct {
	URL string `json:"url"`
	domain.Source
}

// LogsRequest appends Data at Offset, which must be the log's current end,
// with the times the runner saw the data's lines (Times, see LineTime)
// and the steps that started or ended (Steps, see StepEvent).
type LogsRequest struct {
	Leased
	Offset *int64      `json:"offset"`
	Data   []byte      `json:"data"` // base64 on the wire
	Times  []LineTime  `json:"times,omitempty"`
	Steps  []StepEvent `json:"steps,omitempty"`
}

// Validate checks the offset is present and not negative (the server also
// bounds it by the log limit), and the marks and step events.
func (r *LogsRequest) Validate() error {
	if r.Offset == nil {
		return domain.Errorf(domain.EInvalid, "field offset is required")
	}
	if *r.Offset < 0 || *r.Offset > math.MaxInt64/2 {
		return domain.Errorf(domain.EInvalid, "field offset must be from 0 to the log limit")
	}
	if err := checkTimes(r.Times, r.Data); err != nil {
		return err
	}
	return checkSteps(r.Steps, *r.Offset+int64(len(r.Data)))
}

// LogsResponse is the log's new end.
type LogsResponse struct {
	NextOffset int64 `json:"next_offset"`
}

// Limits of a job's outputs (the outputs route), and of the request's
// body: outputs of control characters grow six times in JSON, and a
// Lambda function's request is at most 6 MB.
const (
	MaxJobOutputs     = domain.MaxJobOutputs
	MaxJobOutputBytes = domain.MaxJobOutputBytes
	MaxOutputsBody    = 5 << 20
)

// OutputsRequest sets the job's outputs for the current attempt: each
// name's value replaces any sent before in the same attempt.
type OutputsRequest struct {
	Leased
	Outputs map[string]string `json:"outputs"`
}

// Validate checks the names and the sizes.
func (r *OutputsRequest) Validate() error {
	if r.Outputs == nil {
		return domain.Errorf(domain.EInvalid, "field outputs is required (an object of strings)")
	}
	if len(r.Outputs) > MaxJobOutputs {
		return domain.Errorf(domain.EInvalid, "field outputs holds %d names, over the limit of %d", len(r.Outputs), MaxJobOutputs)
	}
	size := 0
	for k, v := range r.Outputs {
		if !domain.OutputNameRE().MatchString(k) {
			return domain.Errorf(domain.EInvalid, "output name %q must start with a letter or _ and hold letters, digits, _ and - (at most 100)", k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return domain.Errorf(domain.EInvalid, "output %s holds a NUL byte: outputs are text", k)
		}
		size += len(k) + len(v)
	}
	if size > MaxJobOutputBytes {
		return domain.Errorf(domain.ETooLarge, "the outputs are %d bytes, over the limit of %d", size, MaxJobOutputBytes)
	}
	return nil
}

// OutputsResponse is empty: the outputs are stored.
type OutputsResponse struct{}

// CompleteRequest reports the attempt's outcome.
type CompleteRequest struct {
	Leased
	Outcome  domain.Outcome `json:"outcome"`
	ExitCode *int           `json:"exit_code"`
	// Reason is optional: why a failed job failed ("timeout").
	Reason string `json:"reason,omitempty"`
}

// Validate checks the outcome is present and the exit code fits.
func (r *CompleteRequest) Validate() error {
	if r.Outcome == "" {
		return domain.Errorf(domain.EInvalid, "field outcome is required")
	}
	if r.ExitCode != nil && (*r.ExitCode < math.MinInt32 || *r.ExitCode > math.MaxInt32) {
		return domain.Errorf(domain.EInvalid, "field exit_code must be from %d to %d", math.MinInt32, math.MaxInt32)
	}
	return nil
}

// Exit is the exit code, 0 when absent.
func (r *CompleteRequest) Exit() int {
	if r.ExitCode == nil {
		return 0
	}
	return *r.ExitCode
}

// CompleteResponse is the run's and the job's state after the report.
type CompleteResponse struct {
	State    string `json:"state"`
	JobState string `json:"job_state"`
}

// ValidDigest reports whether d is sha256:<64 lowercase hex digits>.
func ValidDigest(d string) bool {
	hexDigits, ok := strings.CutPrefix(d, "sha256:")
	return ok && domain.LowerHex(hexDigits, 64)
}

// ValidBlob checks a digest (sha256:<64 hex>) and a size from 0 to MaxBlobBytes.
func ValidBlob(digest string, size *int64) error {
	if !ValidDigest(digest) {
		return domain.Errorf(domain.EInvalid, "field digest must be sha256:<64 lowercase hex digits>")
	}
	if size == nil || *size < 0 || *size > MaxBlobBytes {
		return domain.Errorf(domain.EInvalid, "field size is required, from 0 to %d", int64(MaxBlobBytes))
	}
	return nil
}

// Blob names a blob a job offers by its digest and size.
type Blob struct {
	Digest string `json:"digest"`
	Size   *int64 `json:"size"`
}

// NewBlob is a Blob of a known size.
func NewBlob(digest string, size int64) Blob { return Blob{Digest: digest, Size: &size} }

// Stored is a blob as the server answers about it.
type Stored struct {
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
}

// ArtifactRequest starts or commits an artifact upload.
type ArtifactRequest struct {
	Leased
	Name string `json:"name"`
	Blob
}

// Validate checks the name and the blob.
func (r *ArtifactRequest) Validate() error {
	if r.Name == "" {
		return domain.Errorf(domain.EInvalid, "field name is required")
	}
	return ValidBlob(r.Digest, r.Size)
}

// UploadResponse says the blob is held already, or where to PUT it.
type UploadResponse struct {
	Exists bool `json:"exists"`
	// KeyExists (cache/save only): the scope has this key already.
	KeyExists bool              `json:"key_exists,omitempty"`
	URL       string            `json:"upload_url,omitempty"`
	Method    string            `json:"upload_method,omitempty"`
	Headers   map[string]string `json:"upload_headers,omitempty"`
}

// ArtifactCommitResponse is the registered artifact.
type ArtifactCommitResponse struct {
	Name string `json:"name"`
	Stored
}

// FetchRequest asks for an artifact of a job this one needs.
type FetchRequest struct {
	Leased
	Job  string `json:"job"`
	Name string `json:"name"`
}

// Validate checks both names are present.
func (r *FetchRequest) Validate() error {
	if r.Job == "" || r.Name == "" {
		return domain.Errorf(domain.EInvalid, "fields job and name are required")
	}
	return nil
}

// BlobResponse is where to download a blob and what it must be.
type BlobResponse struct {
	URL string `json:"url"`
	Stored
}

// RestoreRequest names cache keys, most specific first.
type RestoreRequest struct {
	Leased
	Keys []string `json:"keys"`
}

// Validate bounds the keys.
func (r *RestoreRequest) Validate() error {
	if len(r.Keys) == 0 || len(r.Keys) > 16 {
		return domain.Errorf(domain.EInvalid, "field keys must hold 1 to 16 keys")
	}
	for _, k := range r.Keys {
		if k == "" || len(k) > 512 {
			return domain.Errorf(domain.EInvalid, "every cache key must be 1 to 512 characters")
		}
	}
	return nil
}

// RestoreResponse is the entry that matched first.
type RestoreResponse struct {
	Key   string `json:"key"`
	Scope string `json:"scope"`
	BlobResponse
}

// CacheRequest starts or commits a cache entry.
type CacheRequest struct {
	Leased
	Key string `json:"key"`
	Blob
}

// Validate checks the key and the blob.
func (r *CacheRequest) Validate() error {
	if r.Key == "" || len(r.Key) > 512 {
		return domain.Errorf(domain.EInvalid, "field key must be 1 to 512 characters")
	}
	return ValidBlob(r.Digest, r.Size)
}

// CacheCommitResponse is the staged entry.
type CacheCommitResponse struct {
	Key string `json:"key"`
	Stored
}
