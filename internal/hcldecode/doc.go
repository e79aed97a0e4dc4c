// Package hcldecode decodes HCL attributes into Go values as gohcl does (the
// same conversions and diagnostics) without importing gohcl, whose
// dependencies' package initialisation every start of postern would pay for,
// and prints diagnostics as file:line:col messages.
package hcldecode
