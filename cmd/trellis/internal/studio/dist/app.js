// built by make studio
