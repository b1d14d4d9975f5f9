package bad
func  X( ) {}
