package api

// Tool names of persistent shells, patches and file search.
const (
	ToolShellStart     = "shell_start"
	ToolShellRun       = "shell_run"
	ToolShellWrite     = "shell_write"
	ToolShellRead      = "shell_read"
	ToolShellInterrupt = "shell_interrupt"
	ToolShellKill      = "shell_kill"
	ToolApplyPatch     = "apply_patch"
	ToolGlob           = "glob"
	ToolGrep           = "grep"
)

// ShellNamePattern is what a shell's name must match.
const ShellNamePattern = `^[A-Za-z0-9_-]{1,64}$`

// ShellStartArgs starts a persistent shell.
type ShellStartArgs struct {
	// Name identifies the shell in later calls.
	Name string `json:"name" jsonschema:"Name of the new shell, used by the other shell tools: 1 to 64 letters, digits, '_' or '-'. A shell of that name must not be running."`
}

// ShellStartResult is what shell_start returns.
type ShellStartResult struct {
	// Name is the shell's name, as asked.
	Name string `json:"name"`
	// Shell is the program run (bash, else sh) and PID its process id.
	Shell string `json:"shell"`
	PID   int    `json:"pid"`
}

// ShellRunArgs runs a command in a persistent shell and waits for it.
type ShellRunArgs struct {
	Name string `json:"name" jsonschema:"Name of a shell started with shell_start."`
	// Command is run by the shell itself, so cd and exports persist.
	Command string `json:"command" jsonschema:"Command line (or several lines) run by the shell itself, so cd, exported variables and functions persist into later runs."`
	// TimeoutS bounds the wait; the command keeps running after it.
	TimeoutS int64 `json:"timeout_s,omitempty" jsonschema:"Seconds to wait for the command to finish; 0 or absent means 600. A command still running then keeps running: follow it with shell_read, answer it with shell_write, stop it with shell_interrupt."`
}

// ShellRunResult is what shell_run returns; the output itself is the
// call's output.
type ShellRunResult struct {
	// ExitCode is the command's exit status; -1 while it is still running.
	ExitCode int `json:"exit_code"`
	// Running is true when the wait ended before the command did.
	Running bool `json:"running,omitempty"`
	// Exited is true when the shell itself has exited.
	Exited      bool  `json:"exited,omitempty"`
	OutputBytes int64 `json:"output_bytes"`
	// DroppedBytes is output lost because it overflowed the shell's buffer.
	DroppedBytes int64 `json:"dropped_bytes,omitempty"`
}

// ShellWriteArgs sends raw input to a shell.
type ShellWriteArgs struct {
	Name string `json:"name" jsonschema:"Name of a shell started with shell_start."`
	Text string `json:"text" jsonschema:"Text written to the shell's terminal as typed, e.g. an answer to a prompt; end it with a newline to submit a line."`
}

// ShellWriteResult is what shell_write returns.
type ShellWriteResult struct {
	Bytes int `json:"bytes"`
}

// ShellReadArgs collects a shell's output not yet read.
type ShellReadArgs struct {
	Name string `json:"name" jsonschema:"Name of a shell started with shell_start."`
	// WaitMS waits for output when none is buffered.
	WaitMS int64 `json:"wait_ms,omitempty" jsonschema:"Milliseconds to wait for output when none is buffered yet (at most 60000); 0 or absent returns at once."`
}

// ShellReadResult is what shell_read returns; the output itself is the
// call's output.
type ShellReadResult struct {
	// Running is true while a command started by shell_run has not finished.
	Running bool `json:"running"`
	// ExitCode is set when the command shell_run left running has finished.
	ExitCode *int `json:"exit_code,omitempty"`
	// Exited is true when the shell itself has exited.
	Exited       bool  `json:"exited,omitempty"`
	OutputBytes  int64 `json:"output_bytes"`
	DroppedBytes int64 `json:"dropped_bytes,omitempty"`
}

// ShellInterruptArgs sends Ctrl-C to a shell's foreground process group.
type ShellInterruptArgs struct {
	Name string `json:"name" jsonschema:"Name of a shell started with shell_start."`
}

// ShellKillArgs kills a shell and its processes.
type ShellKillArgs struct {
	Name string `json:"name" jsonschema:"Name of a shell started with shell_start."`
}

// ShellDoneResult is what shell_interrupt and shell_kill return.
type ShellDoneResult struct {
	Name string `json:"name"`
}

// ApplyPatchArgs applies a unified diff to the workspace.
type ApplyPatchArgs struct {
	Patch string `json:"patch" jsonschema:"A unified diff in git diff style, paths relative to the workspace (a/ and b/ prefixes allowed); it may change, create, delete or rename several files. It is applied whole or not at all."`
}

// ApplyPatchResult is what apply_patch returns.
type ApplyPatchResult struct {
	// Files are the paths the patch touched, relative to the workspace.
	Files []string `json:"files"`
}

// GlobArgs lists files matching a pattern.
type GlobArgs struct {
	Pattern string `json:"pattern" jsonschema:"Pattern relative to the workspace unless absolute: '*' and '?' match within a path element, '[...]' a character class, '**' any number of directories (e.g. src/**/*.go)."`
}

// GlobResult is what glob returns.
type GlobResult struct {
	// Matches are sorted paths, relative to the workspace when the pattern is.
	Matches []string `json:"matches"`
	// Truncated is true when there were more than the limit.
	Truncated bool `json:"truncated,omitempty"`
}

// GrepArgs searches files for a regular expression.
type GrepArgs struct {
	Pattern string `json:"pattern" jsonschema:"Regular expression (Go RE2 syntax) matched against each line."`
	Path    string `json:"path,omitempty" jsonschema:"File or directory to search, relative to the workspace unless absolute; default the workspace. .git, binary files and files over 1 MiB are skipped."`
	Include string `json:"include,omitempty" jsonschema:"Glob that file names (or paths relative to path, when it has a '/') must match, e.g. *.go or src/**/*.ts."`
	// MaxMatches bounds the result; 0 means 200.
	MaxMatches int  `json:"max_matches,omitempty" jsonschema:"Most matches to return; 0 or absent means 200."`
	IgnoreCase bool `json:"ignore_case,omitempty" jsonschema:"Match without regard to case."`
}

// GrepMatch is one matching line.
type GrepMatch struct {
	// File is the file's path relative to the workspace, with '/' (absolute
	// when outside it).
	File string `json:"file"`
	// Line is 1-based; Text is the line, cut when very long.
	Line int    `json:"line"`
	Text string `json:"text"`
}

// GrepResult is what grep returns.
type GrepResult struct {
	Matches []GrepMatch `json:"matches"`
	// Truncated is true when more matches exist than were returned.
	Truncated bool `json:"truncated,omitempty"`
}
