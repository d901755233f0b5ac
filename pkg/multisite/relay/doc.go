// Package relay is the site-relay (cmd/site-relay): one per site, it
// scrapes its site's EPP, polls every peer relay over mutual TLS, and
// serves the load signals of every site to its local EPP.
//
// Placeholder: the full documentation is written with the code.
package relay
