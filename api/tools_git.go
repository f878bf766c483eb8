package api

// Tool names of the git tools that work on a clone under repos/<name>.
const (
	ToolGitStatus   = "git_status"
	ToolGitDiff     = "git_diff"
	ToolGitCheckout = "git_checkout"
	ToolGitCommit   = "git_commit"
	ToolGitPush     = "git_push"
)

// GitStatusArgs reports the state of a clone.
type GitStatusArgs struct {
	// Repo is the clone's directory name under repos/.
	Repo string `json:"repo" jsonschema:"The clone's directory name under repos/ in the workspace (the name given to git_clone)."`
}

// GitFileStatus is one changed path of a clone.
type GitFileStatus struct {
	// Path is relative to the repository's top.
	Path string `json:"path"`
	// OrigPath is the path before a rename or copy.
	OrigPath string `json:"orig_path,omitempty"`
	// Index and Worktree are git's one-letter status codes (M, A, D, R, C,
	// T, U, ?, !; "." means unchanged).
	Index    string `json:"index"`
	Worktree string `json:"worktree"`
	// Kind is "changed", "renamed", "unmerged", "untracked" or "ignored".
	Kind string `json:"kind"`
}

// GitStatusResult is what git_status returns.
type GitStatusResult struct {
	// Branch is the checked-out branch; empty when HEAD is detached.
	Branch string `json:"branch"`
	// Head is HEAD's commit; empty in a repository without commits.
	Head string `json:"head"`
	// Upstream is the branch's upstream, e.g. origin/main; empty when none.
	Upstream string `json:"upstream,omitempty"`
	// Ahead and Behind count commits against Upstream.
	Ahead  int `json:"ahead"`
	Behind int `json:"behind"`
	// Clean is set when nothing is changed or untracked (ignored files do
	// not count).
	Clean bool            `json:"clean"`
	Files []GitFileStatus `json:"files"`
	// Truncated is set when more files changed than Files lists.
	Truncated bool `json:"truncated,omitempty"`
}

// GitDiffArgs shows a clone's changes.
type GitDiffArgs struct {
	// Repo is the clone's directory name under repos/.
	Repo string `json:"repo" jsonschema:"The clone's directory name under repos/ in the workspace."`
	// Staged diffs the index against HEAD instead of the work tree against the index.
	Staged bool `json:"staged,omitempty" jsonschema:"Show staged changes (the index against HEAD) instead of unstaged ones (the work tree against the index)."`
	// Paths limits the diff.
	Paths []string `json:"paths,omitempty" jsonschema:"Limit the diff to these paths, relative to the repository's top; absent means every path."`
}

// GitDiffResult is what git_diff returns.
type GitDiffResult struct {
	// Diff is the unified diff, cut at a bound.
	Diff string `json:"diff"`
	// Bytes is the whole diff's size.
	Bytes     int64 `json:"bytes"`
	Truncated bool  `json:"truncated,omitempty"`
}

// GitCheckoutArgs switches a clone to a ref, or makes a new branch.
type GitCheckoutArgs struct {
	// Repo is the clone's directory name under repos/.
	Repo string `json:"repo" jsonschema:"The clone's directory name under repos/ in the workspace."`
	// Ref is a branch, tag or commit; with Create, the new branch's name.
	Ref string `json:"ref" jsonschema:"Branch, tag or commit to check out (a branch only on origin is checked out tracking it); with create, the name of the new branch."`
	// Create makes a new branch named Ref at the current commit.
	Create bool `json:"create,omitempty" jsonschema:"Create a new branch named ref at the current commit and check it out; it must not exist yet."`
}

// GitCheckoutResult is what git_checkout returns.
type GitCheckoutResult struct {
	// Branch is the checked-out branch; empty when HEAD is detached.
	Branch string `json:"branch"`
	Head   string `json:"head"`
}

// GitCommitArgs commits changes of a clone.
type GitCommitArgs struct {
	// Repo is the clone's directory name under repos/.
	Repo string `json:"repo" jsonschema:"The clone's directory name under repos/ in the workspace."`
	// Message is the commit message.
	Message string `json:"message" jsonschema:"The commit message; must not be empty."`
	// All stages every change first, new and deleted files included.
	All bool `json:"all,omitempty" jsonschema:"Stage every change in the work tree first, new and deleted files included."`
	// Paths are staged first.
	Paths []string `json:"paths,omitempty" jsonschema:"Stage these paths (relative to the repository's top) first; with neither all nor paths, what is already staged is committed."`
}

// GitCommitResult is what git_commit returns.
type GitCommitResult struct {
	// Commit is the new commit's sha.
	Commit string `json:"commit"`
	// Branch is the branch it was made on; empty when HEAD is detached.
	Branch string `json:"branch"`
}

// GitPushArgs pushes a branch of a clone.
type GitPushArgs struct {
	// Repo is the clone's directory name under repos/.
	Repo string `json:"repo" jsonschema:"The clone's directory name under repos/ in the workspace."`
	// Remote defaults to origin.
	Remote string `json:"remote,omitempty" jsonschema:"Remote to push to; absent means origin."`
	// Branch defaults to the checked-out branch.
	Branch string `json:"branch,omitempty" jsonschema:"Local branch to push to the branch of the same name on the remote; absent means the checked-out branch."`
	// SetUpstream makes the remote branch the local branch's upstream.
	SetUpstream bool `json:"set_upstream,omitempty" jsonschema:"Make the pushed remote branch the local branch's upstream."`
}

// GitPushResult is what git_push returns.
type GitPushResult struct {
	// Remote and Branch are where the commit was pushed.
	Remote string `json:"remote"`
	Branch string `json:"branch"`
	// Commit is the pushed commit.
	Commit string `json:"commit"`
}
