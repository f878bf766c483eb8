package api

import "math"

// ToolComputer drives the session's desktop: Anthropic's computer-use
// action set (computer_20250124) on the display the session's programs
// find in $DISPLAY. The remote offers it only when the session has a
// desktop (Capabilities.Desktop).
const ToolComputer = "computer"

// The computer tool's actions, as Anthropic's computer-use tool names them.
const (
	ComputerScreenshot     = "screenshot"
	ComputerLeftClick      = "left_click"
	ComputerRightClick     = "right_click"
	ComputerMiddleClick    = "middle_click"
	ComputerDoubleClick    = "double_click"
	ComputerTripleClick    = "triple_click"
	ComputerLeftClickDrag  = "left_click_drag"
	ComputerLeftMouseDown  = "left_mouse_down"
	ComputerLeftMouseUp    = "left_mouse_up"
	ComputerMouseMove      = "mouse_move"
	ComputerScroll         = "scroll"
	ComputerType           = "type"
	ComputerKey            = "key"
	ComputerHoldKey        = "hold_key"
	ComputerCursorPosition = "cursor_position"
	ComputerWait           = "wait"
	ComputerZoom           = "zoom"
)

// ComputerActions lists the computer tool's actions.
var ComputerActions = []string{
	ComputerScreenshot, ComputerLeftClick, ComputerRightClick, ComputerMiddleClick, ComputerDoubleClick,
	ComputerTripleClick, ComputerLeftClickDrag, ComputerLeftMouseDown, ComputerLeftMouseUp, ComputerMouseMove,
	ComputerScroll, ComputerType, ComputerKey, ComputerHoldKey, ComputerCursorPosition, ComputerWait, ComputerZoom,
}

// Computer-use limits. A screenshot larger than ComputerMaxLongEdge pixels
// on its long edge or ComputerMaxPixels in all is scaled down (aspect
// kept) to the largest size within both, Anthropic's advice for its
// models; coordinates are then in the scaled image's space.
const (
	ComputerMaxLongEdge = 1568
	ComputerMaxPixels   = 1_150_000
	// ComputerMaxDurationS bounds wait and hold_key.
	ComputerMaxDurationS = 100
	// ComputerMaxScroll bounds scroll_amount.
	ComputerMaxScroll = 100
)

// ComputerScreenshotSize is the size of a screenshot of a w×h display: the
// display's own when within ComputerMaxLongEdge and ComputerMaxPixels, else
// the largest size within both, aspect kept. The remote scales its
// screenshots to it and the agent tells models it is the screen's size.
func ComputerScreenshotSize(w, h int) (int, int) {
	f := 1.0
	if long := max(w, h); long > ComputerMaxLongEdge {
		f = float64(ComputerMaxLongEdge) / float64(long)
	}
	if px := float64(w) * float64(h); px*f*f > ComputerMaxPixels {
		f = math.Sqrt(ComputerMaxPixels / px)
	}
	if f >= 1 {
		return w, h
	}
	return max(1, int(float64(w)*f)), max(1, int(float64(h)*f))
}

// ComputerArgs is one computer action, with the fields Anthropic's
// computer-use tool gives it.
type ComputerArgs struct {
	Action string `json:"action" jsonschema:"What to do: screenshot, left_click, right_click, middle_click, double_click, triple_click, left_click_drag, left_mouse_down, left_mouse_up, mouse_move, scroll, type, key, hold_key, cursor_position, wait or zoom."`
	// Coordinate is [x, y] in the screenshot's space.
	Coordinate []int `json:"coordinate,omitempty" jsonschema:"[x, y] in the screenshot's pixels: where to click, move or scroll (clicks and scroll default to the pointer's place); the end of left_click_drag."`
	// StartCoordinate is where left_click_drag starts.
	StartCoordinate []int `json:"start_coordinate,omitempty" jsonschema:"[x, y] where left_click_drag presses the button."`
	// Text is what type types, the key combination of key and hold_key,
	// or the modifier keys held during a click or scroll.
	Text string `json:"text,omitempty" jsonschema:"type: the text to type; key and hold_key: xdotool key names joined by '+' (ctrl+a, Return, shift+Tab, F5); clicks and scroll: modifier keys to hold (shift, ctrl, alt, super)."`
	// Key is the modifier keys of a click or scroll, as Text: Anthropic's
	// reference computer-use tool names them so for clicks, and a model
	// may send either.
	Key string `json:"key,omitempty" jsonschema:"clicks and scroll: modifier keys to hold, as text (give one of the two)."`
	// ScrollDirection is up, down, left or right.
	ScrollDirection string `json:"scroll_direction,omitempty" jsonschema:"scroll: up, down, left or right."`
	// ScrollAmount is how many wheel clicks scroll turns.
	ScrollAmount *int `json:"scroll_amount,omitempty" jsonschema:"scroll: how many wheel clicks (default 3)."`
	// Duration is how long wait waits and hold_key holds, in seconds.
	Duration *float64 `json:"duration,omitempty" jsonschema:"wait and hold_key: seconds (up to 100)."`
	// Region is [x0, y0, x1, y1] in the screenshot's space.
	Region []int `json:"region,omitempty" jsonschema:"zoom: [x0, y0, x1, y1], the top-left and bottom-right corners in the screenshot's pixels; the region is returned at the display's full resolution."`
}

// ComputerImage is an image a computer action returns, base64-encoded.
type ComputerImage struct {
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
}

// ComputerResult is what a computer action returns. Every action but
// cursor_position returns a screenshot taken after it (zoom: the region).
type ComputerResult struct {
	// Image is the screenshot (PNG); Width and Height are its size.
	Image  *ComputerImage `json:"image,omitempty"`
	Width  int            `json:"width,omitempty"`
	Height int            `json:"height,omitempty"`
	// Coordinate is the pointer's place, in the screenshot's space
	// (cursor_position).
	Coordinate []int `json:"coordinate,omitempty"`
	// DisplayWidth and DisplayHeight are the display's size; they differ
	// from a screenshot's when it was scaled down.
	DisplayWidth  int `json:"display_width"`
	DisplayHeight int `json:"display_height"`
}

// DesktopSize is a session's desktop size (spec.desktop).
type DesktopSize struct {
	Width  int `json:"width"`
	Height int `json:"height"`
}

// Bounds of a session's desktop size.
const (
	MinDesktopSize = 200
	MaxDesktopSize = 4096
)

// Size of a desktop whose session names none (spec.desktop omitted).
const (
	DefaultDesktopWidth  = 1280
	DefaultDesktopHeight = 800
)
