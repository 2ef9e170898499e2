// Package testpki makes certificate authorities, certificates and CRLs for
// tests: every key is made by the test that uses it, so no key is committed.
// Only tests import it (credentials, security/advancedtls).
package testpki
