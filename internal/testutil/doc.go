// Package testutil holds the helpers every package's tests share. It is imported by
// _test.go files only and must not import anything of this module, so every package can
// use it without a cycle.
package testutil
