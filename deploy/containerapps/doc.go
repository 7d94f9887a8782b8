// Package containerapps holds the Azure Container Apps template
// (main.bicep) and an example parameters file (main.bicepparam); its test
// checks the template's promised shape as text, since no Bicep compiler is
// available where the tests run.
package containerapps
