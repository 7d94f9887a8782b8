// Package containerapps holds the Azure Container Apps template
// (main.bicep) and an example parameters file (main.bicepparam); its test
// checks the template's promised shape as text, since no Bicep compiler is
// available where the tests run.
//
// It must not import any package of the module: it is files and a test.
package containerapps
