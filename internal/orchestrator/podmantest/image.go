package podmantest

// Image is the test image: Debian bookworm minbase with git.
const Image = "outpost-test:bookworm"
