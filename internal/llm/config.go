package llm

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"strings"
	"time"
)

// Provider names for [Config.Provider].
const (
	// ProviderOpenAI is any OpenAI-compatible Chat Completions endpoint.
	ProviderOpenAI = "openai"
	// ProviderAnthropic is Anthropic's Messages API.
	ProviderAnthropic = "anthropic"
)

// Defaults for the zero values of [Config].
const (
	DefaultTimeout = 10 * time.Minute
	// DefaultRetryFor is how long a request's retryable failures are
	// retried when [Config.RetryFor] is zero: long enough to ride out a
	// provider's short outage or rate limit.
	DefaultRetryFor = 2 * time.Minute
)

// Config says which provider to call and how.
type Config struct {
	// Provider is ProviderOpenAI or ProviderAnthropic (case-insensitive);
	// anything else, empty included, makes New fail.
	Provider string
	// BaseURL is the endpoint's root; empty means the provider's public API.
	// For OpenAI-compatible servers it includes the version path, e.g.
	// "http://localhost:11434/v1"; for Anthropic it is the host root, e.g.
	// "https://api.anthropic.com".
	BaseURL string
	// APIKey is sent as a bearer token; empty means none is sent (fine for
	// local servers such as Ollama or vLLM).
	APIKey string
	// Model is the model used when a Request names none; empty means every
	// Request must name one.
	Model string
	// Timeout bounds each attempt (one HTTP request and its response); zero
	// means DefaultTimeout, negative means no limit but the context's. A
	// timed-out attempt is not retried.
	Timeout time.Duration
	// MaxRetries bounds how many times a retryable failure (429, 5xx,
	// connection error) is retried; zero means no bound but RetryFor's,
	// negative means never.
	MaxRetries int
	// RetryFor is how long retryable failures of one request are retried,
	// counted from its first attempt, waiting between tries with
	// exponential backoff and jitter or as long as Retry-After asks; zero
	// means DefaultRetryFor, negative means no bound but MaxRetries'.
	RetryFor time.Duration
	// HTTPClient sends the requests; nil means a new client with Go's
	// default transport.
	HTTPClient *http.Client
	// ComputerTool says how a request's computer tool ([Request.Computer])
	// reaches Anthropic models: ComputerToolNative (the zero value's
	// meaning) as Anthropic's computer-use tool type with its beta header,
	// or ComputerToolFunction as the plain function tool, for
	// Anthropic-compatible servers without that beta. OpenAI-compatible
	// servers always get the function tool.
	ComputerTool string
	// ComputerToolVersion is the native tool's version: ComputerUse20250124
	// (the zero value's meaning) or ComputerUse20251124, which newer models
	// need and which adds zoom.
	ComputerToolVersion string
	// ToolImages says how images of tool results reach OpenAI-compatible
	// servers, whose tool messages carry text only: ToolImagesMessage (the
	// zero value's meaning) sends them in a user message of image_url parts
	// after the turn's tool messages; ToolImagesText sends a line per image
	// saying it was left out, for servers without vision.
	ToolImages string
}

// Values of [Config.ComputerTool].
const (
	ComputerToolNative   = "native"
	ComputerToolFunction = "function"
)

// Values of [Config.ToolImages].
const (
	ToolImagesMessage = "message"
	ToolImagesText    = "text"
)

// Names of the environment variables ConfigFromEnv reads; the CLI's flag
// help names them through these.
const (
	EnvProvider = "OUTPOST_LLM_PROVIDER"
	EnvBaseURL  = "OUTPOST_LLM_BASE_URL"
	EnvAPIKey   = "OUTPOST_LLM_API_KEY"
	EnvModel    = "OUTPOST_LLM_MODEL"
	// EnvComputerTool is Config.ComputerTool: native or function.
	EnvComputerTool = "OUTPOST_LLM_COMPUTER_TOOL"
	// EnvComputerToolVersion is Config.ComputerToolVersion:
	// computer_20250124 or computer_20251124.
	EnvComputerToolVersion = "OUTPOST_LLM_COMPUTER_TOOL_VERSION"
	// EnvToolImages is Config.ToolImages: message or text.
	EnvToolImages = "OUTPOST_LLM_TOOL_IMAGES"
	// EnvRetryFor is Config.RetryFor, a Go duration (2m, 90s); the CLI
	// reads it, as ConfigFromEnv cannot report a malformed one.
	EnvRetryFor = "OUTPOST_LLM_RETRY_FOR"
)

// ConfigFromEnv reads a Config from EnvProvider, EnvBaseURL, EnvAPIKey,
// EnvModel, EnvComputerTool, EnvComputerToolVersion and EnvToolImages
// through getenv (nil means os.Getenv). Other fields are left zero.
func ConfigFromEnv(getenv func(string) string) Config {
	if getenv == nil {
		getenv = os.Getenv
	}
	return Config{
		Provider: strings.TrimSpace(getenv(EnvProvider)),
		BaseURL:  strings.TrimSpace(getenv(EnvBaseURL)),
		APIKey:   strings.TrimSpace(getenv(EnvAPIKey)),
		Model:    strings.TrimSpace(getenv(EnvModel)),

		ComputerTool:        strings.TrimSpace(getenv(EnvComputerTool)),
		ComputerToolVersion: strings.TrimSpace(getenv(EnvComputerToolVersion)),
		ToolImages:          strings.TrimSpace(getenv(EnvToolImages)),
	}
}

// New returns the Provider that cfg describes. Neither SDK reads the
// environment (OPENAI_*, ANTHROPIC_*) or profile files here: cfg is all the
// configuration there is.
func New(cfg Config) (Provider, error) {
	name := strings.ToLower(strings.TrimSpace(cfg.Provider))
	c := &client{
		provider: name,
		model:    cfg.Model,
		timeout:  cfg.Timeout,
		retries:  cfg.MaxRetries,
		retryFor: cfg.RetryFor,
		backoff:  defaultBackoff,
	}
	if c.timeout == 0 {
		c.timeout = DefaultTimeout
	}
	switch {
	case c.retries == 0:
		c.retries = math.MaxInt
	case c.retries < 0:
		c.retries = 0
	}
	switch {
	case c.retryFor == 0:
		c.retryFor = DefaultRetryFor
	case c.retryFor < 0:
		c.retryFor = math.MaxInt64
	}
	if c.retries == math.MaxInt && c.retryFor == math.MaxInt64 {
		return nil, errors.New("llm: MaxRetries and RetryFor cannot both be unbounded: a failing provider would be retried forever")
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	computer, err := computerToolOf(cfg)
	if err != nil {
		return nil, err
	}
	images := strings.ToLower(strings.TrimSpace(cfg.ToolImages))
	switch images {
	case "":
		images = ToolImagesMessage
	case ToolImagesMessage, ToolImagesText:
	default:
		return nil, fmt.Errorf("llm: unknown tool images mode %q (%s): want %q or %q", cfg.ToolImages, EnvToolImages, ToolImagesMessage, ToolImagesText)
	}
	switch name {
	case ProviderOpenAI:
		b := newOpenAI(cfg.BaseURL, cfg.APIKey, hc)
		b.imagesAsText = images == ToolImagesText
		c.backend = b
	case ProviderAnthropic:
		b := newAnthropic(cfg.BaseURL, cfg.APIKey, hc, c.timeout)
		b.computer = computer
		c.backend = b
	case "":
		return nil, fmt.Errorf("llm: no provider configured: set OUTPOST_LLM_PROVIDER to %q or %q", ProviderOpenAI, ProviderAnthropic)
	default:
		return nil, fmt.Errorf("llm: unknown provider %q: want %q or %q", cfg.Provider, ProviderOpenAI, ProviderAnthropic)
	}
	return c, nil
}

// computerToolOf checks cfg's computer-tool settings and returns the native
// tool version to offer Anthropic models, or nil for the function tool.
func computerToolOf(cfg Config) (*computerVersion, error) {
	mode := strings.ToLower(strings.TrimSpace(cfg.ComputerTool))
	switch mode {
	case "", ComputerToolNative, ComputerToolFunction:
	default:
		return nil, fmt.Errorf("llm: unknown computer tool mode %q (%s): want %q or %q", cfg.ComputerTool, EnvComputerTool, ComputerToolNative, ComputerToolFunction)
	}
	name := strings.ToLower(strings.TrimSpace(cfg.ComputerToolVersion))
	if name == "" {
		name = ComputerUse20250124
	}
	v, ok := computerVersions[name]
	if !ok {
		return nil, fmt.Errorf("llm: unknown computer tool version %q (%s): want %q or %q", cfg.ComputerToolVersion, EnvComputerToolVersion, ComputerUse20250124, ComputerUse20251124)
	}
	if mode == ComputerToolFunction {
		return nil, nil
	}
	return &v, nil
}
