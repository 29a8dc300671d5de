package router

// NewGatedLoggerForTest exposes the router's Watermill logger to the external tests.
var NewGatedLoggerForTest = newGatedLogger
