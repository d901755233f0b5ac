package config_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/require"

	configfiles "github.com/switchyard-ai/switchyard/config"
	"github.com/switchyard-ai/switchyard/pkg/config"
)

// TestOverrideNotesLoggedOnChange: the selection strategy override's
// notes are logged at start-up, not again on a reload that changes
// nothing they say, and again when they change; Loaded.Notes has them
// every time.
func TestOverrideNotesLoggedOnChange(t *testing.T) {
	var (
		mu     sync.Mutex
		logged int
	)
	log := funcr.New(func(_, args string) {
		if strings.Contains(args, "Selection strategy override") {
			mu.Lock()
			logged++
			mu.Unlock()
		}
	}, funcr.Options{})
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := logged
		logged = 0
		return n
	}
	first, err := loadWith(t, string(configfiles.Default), config.Options{SelectionStrategy: "LeastBusy", Logger: log})
	require.NoError(t, err)
	require.Len(t, first.Notes, 1)
	require.Equal(t, 1, count(), "logged at start-up")

	same, err := loadWith(t, string(configfiles.Default), config.Options{SelectionStrategy: "LeastBusy", Logger: log, Previous: first})
	require.NoError(t, err)
	require.Equal(t, first.Notes, same.Notes, "every load has its notes")
	require.Zero(t, count(), "a reload with the same override does not log it again")
	first.Release(same)

	changed, err := loadWith(t, string(configfiles.Default), config.Options{SelectionStrategy: "RoundRobin", Logger: log, Previous: same})
	require.NoError(t, err)
	require.Len(t, changed.Notes, 1)
	require.Equal(t, 1, count(), "a changed note is logged")
	same.Release(changed)
}
