// Command migrate is the ForgeCI Lambda function behind the template's
// Custom::Migrations resource: it applies the embedded migrations on every
// deploy that changes them (lambdaapp.Migrations). Wiring only.
package main

import "github.com/forgeci/forgeci/shared/lambdaapp"

func main() {
	lambdaapp.StartMigrations()
}
