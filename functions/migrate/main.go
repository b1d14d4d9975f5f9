// Command migrate is the ForgeCI Lambda function behind the template's
// Custom::Migrations resource: it applies the embedded migrations on every
// deploy that changes them (migrator.Migrations). Wiring only.
package main

import "github.com/forgeci/forgeci/shared/lambdaapp/migrator"

func main() {
	migrator.Start()
}
