// Package docs tests that the documentation (README.md, CONTRIBUTING.md, SECURITY.md,
// CHANGELOG.md and docs/) stays true to the code: every relative link and anchor
// resolves (GitHub's heading anchors), every YAML example is accepted by a real API
// server, every flag the docs attribute to the switchboard binary is one it defines,
// every switchboard_* metric the docs name is one the code registers and every one it
// registers is documented, and the troubleshooting page names every condition reason of
// api/v1alpha1. `make test` runs it.
//
// Test code only.
package docs
